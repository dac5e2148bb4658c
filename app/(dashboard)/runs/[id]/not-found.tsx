import Link from "next/link";

/** A run id no record has (trimmed by retention, expired, or mistyped): a 404 that says where to look. */
export default function RunNotFound() {
  return (
    <section aria-labelledby="page-title" className="space-y-3">
      <h1 id="page-title" className="text-xl font-semibold">
        No such run
      </h1>
      <p className="text-sm text-slate-700">
        No run record has this id: it may have been trimmed by the retention settings, or the link is mistyped.
      </p>
      <p className="text-sm">
        <Link className="text-sky-700 underline" href="/runs">
          All runs
        </Link>
      </p>
    </section>
  );
}
