export const metadata = { title: "Audit · claimwatch" };

export default function AuditPage() {
  return (
    <section aria-labelledby="page-title">
      <h1 id="page-title" className="text-xl font-semibold">
        Audit
      </h1>
      <p className="mt-2 text-sm text-slate-600">Force releases and triggers appear here.</p>
    </section>
  );
}
