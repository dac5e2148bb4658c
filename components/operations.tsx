"use client";

import { useMutation, useQueryClient } from "@tanstack/react-query";
import Link from "next/link";
import { useEffect, useId, useRef, useState } from "react";
import type { CancelResult } from "@/lib/operations/cancel";
import type { RetryResult } from "@/lib/operations/retry";
import type { ScheduleChangeResult } from "@/lib/operations/schedule";
import { apiFetch, rereadChanged, type OperatorChange } from "@/lib/ui/queries";
import { useCanOperate } from "./role";

/**
 * An operator action that needs a reason: a button opens a small inline form (reason, confirm);
 * the result or the error is announced in place. Hidden for viewers (the server checks again).
 */
function ReasonAction<T>({
  label,
  confirmLabel,
  explain,
  run,
  describe,
  changes,
  danger = false,
  onOutcome,
}: {
  /** The opening button's accessible name (e.g. "Cancel job run-…"). */
  label: string;
  confirmLabel: string;
  explain: string;
  run: (reason: string) => Promise<T>;
  describe: (result: T) => React.ReactNode;
  /** What the action changes: re-read once it succeeds. */
  changes: OperatorChange;
  danger?: boolean;
  /**
   * Also told what came of it: where the button's own row may vanish with the change (a job
   * cancelled off the Queue page), the page says it instead.
   */
  onOutcome?: (text: React.ReactNode) => void;
}) {
  const canOperate = useCanOperate();
  const queryClient = useQueryClient();
  const [open, setOpen] = useState(false);
  const [reason, setReason] = useState("");
  const id = useId();
  // Set at the first submit, before React disables the button: a double click sent it twice.
  const sending = useRef(false);
  // Keyboard use (helper-136): the form takes focus in its reason field when it opens, and
  // Escape or Close gives it back to the button that opened it.
  const opener = useRef<HTMLButtonElement>(null);
  const refocus = useRef(false);
  const close = () => {
    refocus.current = true;
    setOpen(false);
  };
  useEffect(() => {
    if (open || !refocus.current) return;
    refocus.current = false;
    opener.current?.focus();
  }, [open]);
  const action = useMutation({
    mutationFn: () => run(reason.trim()),
    onSuccess: (result) => {
      close();
      onOutcome?.(describe(result));
      rereadChanged(queryClient, changes);
    },
    onSettled: () => {
      sending.current = false;
    },
  });
  if (!canOperate) return null;
  const visible = label.split(":")[0];
  return (
    <div className="inline-flex flex-col gap-1 text-xs">
      {open ? (
        <form
          aria-label={label}
          className="flex flex-col gap-1 rounded border border-slate-300 bg-white p-2"
          onKeyDown={(event) => {
            if (event.key === "Escape") close();
          }}
          onSubmit={(event) => {
            event.preventDefault();
            if (sending.current) return;
            sending.current = true;
            action.mutate();
          }}
        >
          <p className="max-w-xs text-slate-700">{explain}</p>
          <label htmlFor={id} className="font-medium">
            Reason (for the audit log)
          </label>
          <input
            id={id}
            // Opened by the operator's own click or key: the reason is what comes next.
            autoFocus
            className="rounded border border-slate-300 px-2 py-1"
            value={reason}
            onChange={(event) => setReason(event.target.value)}
          />
          <div className="flex gap-2">
            <button
              type="submit"
              disabled={reason.trim().length < 3 || action.isPending}
              className={`rounded px-2 py-1 font-medium text-white disabled:opacity-50 ${danger ? "bg-red-700" : "bg-slate-900"}`}
            >
              {confirmLabel}
            </button>
            <button type="button" className="rounded border px-2 py-1" onClick={close}>
              Close
            </button>
          </div>
          {action.error ? <p className="text-red-700">{action.error.message}</p> : null}
        </form>
      ) : (
        <button
          ref={opener}
          type="button"
          aria-label={label}
          onClick={() => {
            action.reset();
            setOpen(true);
          }}
          className={`rounded border px-2 py-1 font-medium ${danger ? "border-red-300 text-red-800" : "border-slate-300"}`}
        >
          {visible}
        </button>
      )}
      {action.data !== undefined && !open ? (
        <p role="status" className="max-w-xs text-slate-700">
          {describe(action.data)}
        </p>
      ) : null}
    </div>
  );
}

/** Cancel a job (running: its worker stops it; waiting: removed), with a reason. */
export function CancelJobButton({
  jobId,
  what,
  onOutcome,
}: {
  jobId: string;
  what: string;
  onOutcome?: (text: React.ReactNode) => void;
}) {
  return (
    <ReasonAction<CancelResult>
      {...(onOutcome ? { onOutcome } : {})}
      label={`Cancel: ${what}`}
      confirmLabel="Cancel job"
      changes="cancel"
      danger
      explain="A running job's steps are stopped (SIGTERM, then SIGKILL after their killGrace), its claim is released and it is not retried. A waiting job is removed from the queue."
      run={(reason) =>
        apiFetch<CancelResult>(
          `/api/jobs/${encodeURIComponent(jobId)}/cancel`,
          { method: "POST", body: JSON.stringify({ reason }) },
          [409],
        )
      }
      describe={(result) => {
        const joined =
          "joinedRequests" in result && result.joinedRequests
            ? ` ${result.joinedRequests} other request(s) for this version had joined it; they end with it.`
            : "";
        switch (result.status) {
          case "removed":
            return result.requeuedFrom
              ? `Cancelled job ${result.jobId}, which the lost job ${result.requeuedFrom} was queued again as: removed from the queue.${joined}`
              : `Cancelled: removed from the queue.${joined}`;
          case "cancelling":
            return result.requeuedFrom
              ? `Cancelling job ${result.jobId}, which the lost job ${result.requeuedFrom} was queued again as: the worker running it is stopping it.${joined}`
              : `Cancelling: the worker running it is stopping it.${joined}`;
          case "finished":
            return result.lastRun
              ? `Nothing to cancel: the job has ended already (its last run ${result.lastRun.id} is ${result.lastRun.status}).`
              : `Nothing to cancel: the job has ${result.state === "completed" ? "completed" : "failed"} already.`;
          case "scheduled-tick":
            return "This is the schedule's next tick: pause the schedule instead.";
          case "abandoned":
            return `Nothing runs it: the job is gone from the queue and the worker of its run ${result.runId} is not live (the sweep closes that run). The request is kept.`;
          case "not-found":
            return result.requestKept
              ? "Nothing to cancel found: the job is in neither the queue nor the run history. The request is kept: a worker still running it (a job its Redis lost) stops it."
              : "Nothing to cancel: the job is gone.";
        }
      }}
    />
  );
}

/** Retry a failed, aborted or cancelled run: same rebuild, tenant and version, forced. */
export function RetryRunButton({ runId }: { runId: string }) {
  return (
    <ReasonAction<RetryResult>
      label={`Retry: run ${runId}`}
      confirmLabel="Retry run"
      changes="queuedRun"
      explain="Queues the same rebuild, tenant and version again, forced (the claim still applies). The new run links back to this one."
      run={(reason) =>
        apiFetch<RetryResult>(
          `/api/runs/${encodeURIComponent(runId)}/retry`,
          { method: "POST", body: JSON.stringify({ reason }) },
          [409],
        )
      }
      describe={(result) =>
        result.status === "already-retried" ? (
          <>
            Not retried:{" "}
            {result.viaRunId ? `its job was retried already, from run ${result.viaRunId},` : "retried already"} as job{" "}
            {result.jobId}, which is {result.jobState}.{" "}
            <Link className="underline" href={`/runs?jobId=${encodeURIComponent(result.jobId)}`}>
              Follow it
            </Link>
          </>
        ) : "jobId" in result ? (
          <>
            {result.status === "deduplicated" ? "Already queued as" : "Queued as"} job {result.jobId}.{" "}
            <Link className="underline" href={`/runs?jobId=${encodeURIComponent(result.jobId)}`}>
              Follow it
            </Link>
          </>
        ) : result.status === "not-retryable" ? (
          `Not retried: the run is ${result.runStatus}.`
        ) : result.status === "job-pending" ? (
          `Not retried: its job is still in the queue (${result.jobState}); the queue runs it again.`
        ) : result.status === "retry-in-progress" ? (
          "Not retried: another Retry of this job is being queued right now; look again in a moment."
        ) : result.status === "job-went-on" ? (
          `Not retried: its job went on (attempt ${result.laterRunId} is ${result.laterStatus === "trimmed" ? "no longer in the run history" : result.laterStatus}).`
        ) : result.status === "unknown-rebuild" ||
          result.status === "request-id-reused" ||
          result.status === "request-cancelled" ? (
          `Not retried: ${result.message}`
        ) : (
          "Not retried."
        )
      }
    />
  );
}

/** Pause or resume a schedule (one tenant, or every tenant of the rebuild). */
export function ScheduleToggle({
  rebuild,
  tenant,
  paused,
}: {
  rebuild: string;
  tenant: string | null;
  paused: boolean;
}) {
  const what = `${rebuild}${tenant ? ` / ${tenant}` : ""}`;
  const action = paused ? "resume" : "pause";
  return (
    <ReasonAction<Extract<ScheduleChangeResult, { status: "done" }>>
      key={action}
      label={`${paused ? "Resume schedule" : "Pause schedule"}: ${what}`}
      confirmLabel={paused ? "Resume" : "Pause"}
      changes="schedule"
      explain={
        paused
          ? "The schedule queues its next tick again. Ticks while it was paused are not counted as missed."
          : "Nothing is queued by this schedule until it is resumed (also across restarts); its ticks do not count as missed. Runs already started go on."
      }
      run={(reason) =>
        apiFetch(`/api/rebuilds/${encodeURIComponent(rebuild)}/schedule`, {
          method: "POST",
          body: JSON.stringify({ action, reason, ...(tenant ? { tenant } : {}) }),
        })
      }
      describe={(result) => result.schedules.map((s) => `${s.schedulerId}: ${s.outcome}`).join("; ")}
    />
  );
}
