export const metadata = { title: "Runs · claimwatch" };

export default function RunsPage() {
  return (
    <section aria-labelledby="page-title">
      <h1 id="page-title" className="text-xl font-semibold">
        Runs
      </h1>
      <p className="mt-2 text-sm text-slate-600">The run history appears here.</p>
    </section>
  );
}
