export const metadata = { title: "Workers · claimwatch" };

export default function WorkersPage() {
  return (
    <section aria-labelledby="page-title">
      <h1 id="page-title" className="text-xl font-semibold">
        Workers
      </h1>
      <p className="mt-2 text-sm text-slate-600">Live workers and their heartbeats appear here.</p>
    </section>
  );
}
