import { WorkersTable } from "@/components/workers-table";
import { publicErrorOf } from "@/lib/api/errors";
import { getWorkers } from "@/lib/api/workers";
import { getWebContext } from "@/lib/web/context";
import { requireViewer } from "@/lib/web/identity";

export const metadata = { title: "Workers · claimwatch" };
export const dynamic = "force-dynamic";

export default async function WorkersPage() {
  await requireViewer();
  let initial: Awaited<ReturnType<typeof getWorkers>> | null = null;
  let readError: string | null = null;
  try {
    initial = await getWorkers(getWebContext());
  } catch (error) {
    // Redis down: the banner says so, the table says it could not read, and retries from the browser.
    readError = publicErrorOf(error).message;
  }
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <h1 id="page-title" className="text-xl font-semibold">
        Workers
      </h1>
      <WorkersTable initial={initial} readError={readError} />
    </section>
  );
}
