export const metadata = { title: "Claims · claimwatch" };

export default function ClaimsPage() {
  return (
    <section aria-labelledby="page-title">
      <h1 id="page-title" className="text-xl font-semibold">
        Claims
      </h1>
      <p className="mt-2 text-sm text-slate-600">Active claims, their holders and live TTLs appear here.</p>
    </section>
  );
}
