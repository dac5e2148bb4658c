"use client";

export function LogoutButton() {
  return (
    <button
      type="button"
      className="rounded border border-slate-300 px-2 py-1 text-xs"
      onClick={async () => {
        await fetch("/api/auth/logout", { method: "POST" });
        window.location.href = "/login";
      }}
    >
      Log out
    </button>
  );
}
