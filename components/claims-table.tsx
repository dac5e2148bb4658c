"use client";

import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import Link from "next/link";
import { useEffect, useRef, useState } from "react";
import { EVALUATOR_CLAIM, evaluatorHolderLabel } from "@/lib/alerts/evaluator-claim";
import { staleNow } from "@/lib/claims/stale";
import type { ApiClaim, ApiClaimPage, ReleaseOutcome } from "@/lib/api/claims";
import {
  apiFetch,
  claimsQuery,
  endedClaimsQuery,
  healthQuery,
  LIVE_POLL_MS,
  queryKeys,
  rebuildHref,
  rereadChanged,
} from "@/lib/ui/queries";
import { EndedClaims } from "./claim-trail";
import { CursorPager } from "./cursor-pager";
import { DataTable } from "./data-table";
import { NotReadYet } from "./not-read-yet";
import { CancelJobButton } from "./operations";
import { SearchBox } from "./search-box";
import { formatDurationMs, SKIPS_TITLE } from "@/lib/ui/format";
import { noticeText, type ReleaseNotice } from "@/lib/ui/release-notice";
import { knownUpTo, notCurrentText, pageFreshness } from "@/lib/ui/freshness";
import { useLiveness, usePollEvery } from "./live-events";
import { useCanOperate } from "./role";
import { Time } from "./time";
import { useHydrated, useNow, useRenderTime, useServerFirst, useServerNow } from "./use-now";
import { useDialogFocus } from "./use-dialog-focus";

/**
 * Active claims, live: TTLs count down between polls from the server's PTTL and the time the
 * page received it. Force release sends back the token the operator was shown.
 */
export function ClaimsTable({
  initial,
  initialQ = "",
  readError = null,
}: {
  initial: ApiClaimPage | null;
  initialQ?: string;
  /** Why the server could not read the claims for the page, or null. */
  readError?: string | null;
}) {
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  const [q, setQ] = useState(initialQ);
  const cursor = cursors[cursors.length - 1] ?? null;
  const renderTime = useRenderTime();
  // The server's page: the query's first data, and what the table shows while it hydrates (a
  // claim's refresh event may have updated the query before it did: useServerFirst).
  const serverPage = initial && cursor === null && q === initialQ ? initial : null;
  const {
    data: live,
    dataUpdatedAt: liveUpdatedAt,
    error: liveError,
  } = useQuery({
    ...claimsQuery(cursor, q),
    refetchInterval: usePollEvery(LIVE_POLL_MS),
    // The render time (not each side's Date.now()) keeps server HTML and hydration identical.
    ...(serverPage ? { initialData: serverPage, initialDataUpdatedAt: renderTime || undefined } : {}),
  });
  const data = useServerFirst(live, serverPage);
  // A failure before this table hydrated is shown once it has (the server's HTML did not say it).
  const error = useHydrated() ? liveError : null;
  const showsServerPage = data === serverPage && data !== live;
  const dataUpdatedAt = showsServerPage && renderTime ? renderTime : liveUpdatedAt;
  const now = useNow();
  const serverNow = useServerNow();
  const canOperate = useCanOperate();
  const [releasing, setReleasing] = useState<{ claim: ApiClaim; readAt: number } | null>(null);
  // The dialog follows its claim's newest read (a refresh moves its TTL back up), counting down between.
  const releasingNow = releasing ? data?.claims.find((c) => c.token === releasing.claim.token) : undefined;
  const [notice, setNotice] = useState<ReleaseNotice | null>(null);
  // How a released claim ended (its holder stopped, or the window ran out): the notice says which.
  const { data: ended } = useQuery({ ...endedClaimsQuery(), refetchInterval: usePollEvery(LIVE_POLL_MS) });

  // The page's one server clock (lib/ui/server-clock): server time minus browser time.
  const offset = serverNow - now;
  // Rows not current (the stream down and no read for a while, or Redis away) say so and are not
  // judged stale by counting here, nor released from: the holder is not to blame (helper-168).
  const liveness = useLiveness();
  const freshness = pageFreshness({ ...liveness, readAt: dataUpdatedAt, now });
  const judgedAt = knownUpTo({ ...liveness, readAt: dataUpdatedAt }) + offset;
  // A claim whose TTL ran out here while no event said so (it expired before this server
  // started watching): ask the server once what is left.
  const queryClient = useQueryClient();
  const ranOut = (data?.claims ?? [])
    .filter((c) => c.pttlMs - (now - dataUpdatedAt) < -1_000)
    .map((c) => c.token)
    .join(",");
  useEffect(() => {
    if (ranOut) void queryClient.invalidateQueries({ queryKey: queryKeys.claims.all() });
  }, [ranOut, queryClient]);

  return (
    <div className="space-y-3">
      <form role="search" aria-label="Search claims" onSubmit={(event) => event.preventDefault()}>
        <SearchBox
          label="Claim name contains"
          placeholder="acme or out/tiles"
          initial={initialQ}
          onSearch={(next) => {
            setCursors([null]);
            setQ(next);
          }}
        />
      </form>
      {error ? (
        <p className="text-sm text-red-700" data-field="claims-error">
          Could not load claims: {error.message}
          {data ? (
            <>
              {" "}
              The rows below are as last read <Time at={dataUpdatedAt} now={now} /> and cannot be acted on until the
              claims can be read again.
            </>
          ) : null}
        </p>
      ) : null}
      {!data && !error ? <NotReadYet what="the claims" serverError={readError} field="claims-reading" /> : null}
      {notice ? (
        <p role="alert" className="rounded border border-slate-300 bg-white px-3 py-2 text-sm">
          {noticeText(notice, data?.claims ?? [], now, ended?.entries)}
        </p>
      ) : null}
      {data && data.claims.length === 0 ? (
        <p className="text-sm text-slate-600">
          {!q
            ? "No active claims: nothing is being rebuilt right now."
            : data.nextCursor
              ? `No claim on this page of the registry contains “${q}”; Next reads on.`
              : `No active claim's name contains “${q}”.`}
        </p>
      ) : null}
      {data && data.claims.length > 0 ? (
        <DataTable
          label="Active claims"
          columns={[
            "Claim",
            "Holder",
            "Fence",
            "Held for",
            "Last heartbeat",
            "TTL",
            "Skips",
            "State",
            { hidden: "Actions" },
          ]}
        >
          {data.claims.map((claim) => {
            const ttlLeft = claim.pttlMs - (now - dataUpdatedAt);
            // Live updates carry refreshes, not their absence: "no refresh for …" is derived (and
            // counts up) here with the server's own rule (lib/claims/stale) on the server's clock —
            // judged as of the last moment the page knows every refresh of (a silent stream proves
            // nothing), and not at all while the rows are not current.
            const known = freshness.current && staleNow(claim, Math.min(serverNow, Math.max(judgedAt, 0))).stale;
            const { stale, reason: staleReason } = known ? staleNow(claim, serverNow) : { stale: false, reason: null };
            const unknown = freshness.current ? null : notCurrentText(freshness, now);
            // The alerts evaluator's claim: no rebuild; its holder's `rebuild` field is its role (web, worker).
            const evaluatorHeldBy = claim.name === EVALUATOR_CLAIM ? evaluatorHolderLabel(claim.rebuild) : null;
            return (
              <tr key={claim.name} data-claim={claim.name} className="border-t border-slate-100 align-top">
                <td className="px-3 py-2">
                  <div className="font-medium">
                    {evaluatorHeldBy ? (
                      <span title="elects the one process that evaluates the alert rules">alerts evaluator</span>
                    ) : claim.rebuild ? (
                      <Link className="text-sky-700 underline" href={rebuildHref(claim.rebuild, claim.tenant)}>
                        {claim.rebuild}
                        {claim.tenant ? ` / ${claim.tenant}` : ""}
                      </Link>
                    ) : (
                      "?"
                    )}
                  </div>
                  <div className="font-mono text-xs text-slate-500" title={claim.name}>
                    {claim.name}
                  </div>
                  {evaluatorHeldBy ? (
                    <div className="text-xs text-slate-500">held by the {evaluatorHeldBy}</div>
                  ) : (
                    <div className="text-xs break-all text-slate-500">version {claim.version ?? "?"}</div>
                  )}
                  {/* A narrow screen shows the name and the action; what decides the action, here too. */}
                  <div className="mt-1 text-xs sm:hidden" data-field="narrow-state">
                    <span
                      className={
                        claim.revoked
                          ? "text-amber-900"
                          : unknown
                            ? "text-amber-800"
                            : stale
                              ? "font-semibold text-red-800"
                              : "text-emerald-700"
                      }
                    >
                      {/* Lower case: the State column's badge keeps the one "Stale" of the row. */}
                      {claim.revoked ? "releasing" : unknown ? "unknown" : stale ? "stale" : "live"}
                    </span>
                    {" · TTL "}
                    {formatDurationMs(Math.max(0, ttlLeft))}
                    {" · "}
                    {claim.holder.workerId || evaluatorHeldBy || "?"}
                  </div>
                </td>
                <td className="px-3 py-2 text-xs">
                  <div className="font-medium">{claim.holder.workerId || evaluatorHeldBy || "?"}</div>
                  <div>
                    {claim.holder.host} · pid {claim.holder.pid}
                  </div>
                  <div>job {claim.holder.jobId ?? "–"}</div>
                  {claim.holder.runId ? (
                    <Link className="text-sky-700 underline" href={`/runs/${claim.holder.runId}`}>
                      run {claim.holder.runId}
                    </Link>
                  ) : null}
                </td>
                <td className="px-3 py-2 font-mono">{claim.fence}</td>
                <td className="px-3 py-2">{formatDurationMs(serverNow - (claim.acquiredAt ?? serverNow))}</td>
                <td className="px-3 py-2 whitespace-nowrap" data-field="heartbeat">
                  <Time at={claim.refreshedAt} now={serverNow} />
                  {claim.refreshEveryMs ? (
                    <div className="text-xs text-slate-500">every {formatDurationMs(claim.refreshEveryMs)}</div>
                  ) : null}
                </td>
                <td
                  className="px-3 py-2 font-mono"
                  data-field="ttl"
                  data-ttl-ms={Math.max(0, Math.round(ttlLeft))}
                  title={unknown ? `counted from the last read; ${unknown}` : undefined}
                >
                  <TtlBar
                    leftMs={Math.min(claim.ttlMs ?? Infinity, Math.max(0, ttlLeft))}
                    ttlMs={claim.ttlMs}
                    stale={stale}
                  />
                  {formatDurationMs(Math.max(0, ttlLeft))}
                  {/* A force release sets its own expiry (the holder's time to stop), which may pass the TTL. */}
                  {claim.revoked ? (
                    <span className="text-xs text-slate-500"> until free</span>
                  ) : (
                    <span className="text-xs text-slate-500"> / {formatDurationMs(claim.ttlMs)}</span>
                  )}
                </td>
                <td className="px-3 py-2" data-field="skips" title={SKIPS_TITLE}>
                  {claim.consecutiveSkips}
                </td>
                <td className="px-3 py-2" data-field="state" data-state-known={unknown ? "no" : "yes"}>
                  {unknown && !claim.revoked ? (
                    <>
                      <span
                        className="rounded bg-amber-100 px-2 py-0.5 text-xs font-semibold text-amber-900 ring-1 ring-amber-300"
                        data-state="unknown"
                      >
                        Unknown
                      </span>
                      <div className="mt-1 text-xs text-amber-900">{unknown}</div>
                    </>
                  ) : claim.revoked ? (
                    <>
                      <span
                        className="rounded bg-amber-100 px-2 py-0.5 text-xs font-semibold text-amber-900 ring-1 ring-amber-300"
                        data-state="releasing"
                      >
                        Releasing
                      </span>
                      <div className="mt-1 text-xs text-amber-900">
                        Force-released by {claim.revoked.by ?? "an operator"}
                        {claim.revoked.at ? (
                          <>
                            {" "}
                            <Time at={claim.revoked.at} now={serverNow} />
                          </>
                        ) : null}
                        ; waiting for the holder to stop (free in at most {formatDurationMs(Math.max(0, ttlLeft))})
                      </div>
                    </>
                  ) : stale ? (
                    <span
                      className="rounded bg-red-100 px-2 py-0.5 text-xs font-semibold text-red-800 ring-1 ring-red-300"
                      title={staleReason ?? ""}
                    >
                      Stale
                    </span>
                  ) : (
                    <span className="text-xs text-emerald-700">live</span>
                  )}
                  {staleReason ? <div className="mt-1 text-xs text-red-800">{staleReason}</div> : null}
                </td>
                <td className="px-3 py-2">
                  {canOperate && !claim.revoked ? (
                    <button
                      type="button"
                      // Rows last read before a failed refresh, or not current, may be out of date: no release from them.
                      disabled={Boolean(error) || Boolean(unknown)}
                      title={
                        error
                          ? "The claims could not be read again: this row may be out of date"
                          : unknown
                            ? `This row is not current (${unknown}): wait for fresh data`
                            : undefined
                      }
                      onClick={() => {
                        setNotice(null);
                        setReleasing({ claim, readAt: dataUpdatedAt });
                      }}
                      className="rounded border border-red-300 px-2 py-1 text-xs text-red-800 hover:bg-red-50 disabled:opacity-50"
                    >
                      Force release
                    </button>
                  ) : null}
                </td>
              </tr>
            );
          })}
        </DataTable>
      ) : null}
      <CursorPager cursors={cursors} nextCursor={data?.nextCursor} onChange={setCursors} />
      {releasing ? (
        <ForceReleaseDialog
          claim={releasingNow ?? releasing.claim}
          readAt={releasingNow ? dataUpdatedAt : releasing.readAt}
          onClose={(outcome) => {
            setReleasing(null);
            if (outcome) setNotice(outcome);
          }}
        />
      ) : null}
      {/* The search applies to the ended claims too: the operator looks for one name. */}
      <EndedClaims search={q} />
    </div>
  );
}

/** Remaining share of the claim's TTL: a refresh fills it again; a bar running empty means no refresh. */
function TtlBar({ leftMs, ttlMs, stale }: { leftMs: number; ttlMs: number | null; stale: boolean }) {
  const share = ttlMs ? Math.min(1, leftMs / ttlMs) : 0;
  const colour = stale || share < 0.25 ? "bg-red-500" : share < 0.5 ? "bg-amber-500" : "bg-emerald-500";
  return (
    <div
      role="meter"
      aria-label="TTL left"
      aria-valuemin={0}
      aria-valuemax={100}
      aria-valuenow={Math.round(share * 100)}
      className="mb-1 h-1.5 w-24 overflow-hidden rounded bg-slate-200"
    >
      <div className={`h-full ${colour}`} data-mark="ttl-bar" style={{ width: `${(share * 100).toFixed(1)}%` }} />
    </div>
  );
}

function ForceReleaseDialog({
  claim,
  readAt,
  onClose,
}: {
  claim: ApiClaim;
  /** When `claim` was read (browser clock): its TTL counts down from there. */
  readAt: number;
  onClose: (notice: ReleaseNotice | null) => void;
}) {
  const queryClient = useQueryClient();
  const now = useNow();
  const ttlLeft = Math.max(0, claim.pttlMs - Math.max(0, now - readAt));
  // Counting up while the dialog is open, as the row beside it does (black-box helper-182: "no
  // refresh for 25 s" here, 50 s in the table).
  const serverNow = useServerNow();
  const staleReason = claim.staleReason ? (staleNow(claim, serverNow).reason ?? claim.staleReason) : null;
  // With no worker live, nothing retries the aborted attempt until one starts.
  const { data: health } = useQuery({ ...healthQuery(), refetchInterval: false });
  const noWorker = health?.workers === 0;
  const [reason, setReason] = useState("");
  const reasonOk = reason.trim().length >= 3;
  const send = () => {
    if (sent.current || !reasonOk) return;
    sent.current = true;
    release.mutate();
  };
  const dialog = useRef<HTMLDivElement>(null);
  const keepFocus = useDialogFocus(dialog);
  // A double click sends one release: `isPending` disables the button only once React re-renders.
  const sent = useRef(false);
  const release = useMutation({
    mutationFn: () =>
      apiFetch<ReleaseOutcome>(
        "/api/claims/release",
        { method: "POST", body: JSON.stringify({ name: claim.name, token: claim.token, reason: oneLine(reason) }) },
        [409],
      ),
    onError: () => {
      sent.current = false; // the operator may try again
    },
    onSuccess: (result) => {
      rereadChanged(queryClient, "forceRelease");
      if (result.status === "released" || result.status === "releasing") {
        onClose({
          released: {
            name: claim.name,
            token: claim.token,
            fence: claim.fence,
            holder: claim.holder.workerId ?? "its holder",
            freeBy: Date.now() + result.releaseWindowMs,
            already: result.status === "releasing",
          },
        });
      } else if (result.status === "not-owner") {
        onClose({
          text: `Not released: the claim changed hands — it is now held by ${result.currentHolder ?? "another holder"}. Nothing was released.`,
        });
      } else
        onClose({ text: "Not released: the claim had already ended (expired or released). Nothing was released." });
    },
  });
  return (
    <div className="fixed inset-0 z-10 flex items-center justify-center bg-black/30">
      <div
        ref={dialog}
        role="dialog"
        aria-modal="true"
        aria-labelledby="release-title"
        className="w-full max-w-lg rounded bg-white p-5 shadow-lg"
        onKeyDown={(event) => {
          if (event.key === "Escape") onClose(null);
          else keepFocus(event);
        }}
      >
        <h2 id="release-title" className="text-lg font-semibold">
          Force release this claim?
        </h2>
        <p className="mt-2 text-sm text-slate-700">
          Only the token shown here is released. If another holder has taken the claim since, nothing happens.
        </p>
        <p className="mt-2 text-sm text-slate-700" data-field="release-effect">
          {claim.holder.jobId ? (
            <>
              The running attempt will be aborted and retried{" "}
              {noWorker
                ? "once a worker is live: none is now, so nothing retries it until one starts"
                : claim.retryAfterReleaseMs === null
                  ? "in a few seconds once its holder has stopped"
                  : `in ${formatDurationMs(Math.ceil((ttlLeft + claim.retryAfterReleaseMs) / 1000) * 1000)} at the latest`}
              {"; to stop it, cancel instead. "}
            </>
          ) : null}
          The holder is told to stop: its steps get SIGTERM, then SIGKILL after their kill grace
          {claim.holder.jobId ? ", and the attempt goes back to the queue without spending a retry" : ""}. Nobody else
          can take the claim until the holder has stopped — at the latest when its TTL (
          <span data-field="release-ttl">{formatDurationMs(ttlLeft)}</span> left) and its steps&apos; kill grace have
          run out — so the holder and the next run never write at once.
        </p>
        {claim.holder.jobId ? (
          <div className="mt-2 text-sm text-slate-700" data-field="cancel-instead">
            <p>To stop this rebuild for good instead (no retry), cancel its job:</p>
            <CancelJobButton jobId={claim.holder.jobId} what={`job ${claim.holder.jobId}`} />
          </div>
        ) : null}
        <dl className="mt-3 grid grid-cols-[8rem_1fr] gap-x-3 gap-y-1 text-sm">
          <dt className="text-slate-500">Claim</dt>
          <dd className="font-mono text-xs break-all">{claim.name}</dd>
          <dt className="text-slate-500">Holder</dt>
          <dd>
            {claim.holder.workerId} ({claim.holder.host}, pid {claim.holder.pid})
          </dd>
          <dt className="text-slate-500">Token</dt>
          <dd className="font-mono text-xs break-all" data-field="token">
            {claim.token}
          </dd>
          <dt className="text-slate-500">Fence</dt>
          <dd className="font-mono">{claim.fence}</dd>
          {staleReason ? (
            <>
              <dt className="text-slate-500">Stale</dt>
              <dd className="text-red-800" data-field="release-stale">
                {staleReason}
              </dd>
            </>
          ) : null}
        </dl>
        <label className="mt-4 block text-sm font-medium" htmlFor="release-reason">
          Reason (for the audit log)
        </label>
        <textarea
          id="release-reason"
          // Opened with the keyboard or the mouse, the dialog's first field has the focus.
          autoFocus
          className="mt-1 w-full rounded border border-slate-300 p-2 text-sm"
          rows={2}
          value={reason}
          aria-describedby="release-reason-hint"
          onChange={(event) => setReason(event.target.value)}
          // Enter releases (the reason is one line in the audit log); Shift+Enter breaks the line.
          onKeyDown={(event) => {
            if (event.key === "Enter" && !event.shiftKey) {
              event.preventDefault();
              send();
            }
          }}
        />
        <p id="release-reason-hint" className="mt-1 text-xs text-slate-500">
          At least 3 characters{reasonOk ? "" : ` (${reason.trim().length} so far)`}; Enter releases.
        </p>
        {release.error ? <p className="mt-2 text-sm text-red-700">{release.error.message}</p> : null}
        <div className="mt-4 flex justify-end gap-2">
          <button type="button" className="rounded border px-3 py-1.5 text-sm" onClick={() => onClose(null)}>
            Close
          </button>
          <button
            type="button"
            disabled={!reasonOk || release.isPending}
            onClick={send}
            className="rounded bg-red-700 px-3 py-1.5 text-sm font-medium text-white disabled:opacity-50"
          >
            Release claim
          </button>
        </div>
      </div>
    </div>
  );
}

/** The textarea's lines as one (the audit log keeps a reason on one line; the API refuses line breaks). */
const oneLine = (text: string) => text.replace(/\s*[\r\n\t]+\s*/g, " ");
