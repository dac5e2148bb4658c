"use client";

export function LogoutButton() {
  return (
    <button
      type="button"
      className="rounded border border-slate-300 px-2 py-1 text-xs"
      onClick={async () => {
        const response = await fetch("/api/auth/logout", { method: "POST" }).catch(() => null);
        const body = (await response?.json().catch(() => null)) as { problem?: string } | null;
        if (!response?.ok) {
          window.alert("Logging out failed: the server did not answer. Close the browser to end the session.");
        } else if (body?.problem) {
          window.alert(`Logged out in this browser, but ${body.problem}.`);
        }
        window.location.href = "/login";
      }}
    >
      Log out
    </button>
  );
}
