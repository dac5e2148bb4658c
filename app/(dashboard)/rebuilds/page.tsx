export const metadata = { title: "Rebuilds · claimwatch" };

export default function RebuildsPage() {
  return (
    <section aria-labelledby="page-title">
      <h1 id="page-title" className="text-xl font-semibold">
        Rebuilds
      </h1>
      <p className="mt-2 text-sm text-slate-600">Rebuild definitions, schedules and Rebuild now appear here.</p>
    </section>
  );
}
