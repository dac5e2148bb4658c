"use client";

import { useEffect, useState } from "react";
import { useHydrated } from "./use-now";

export function LoginForm() {
  const [token, setToken] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  // True once hydrated, by when the link listener below is attached (the hydration's effects run
  // before this re-render): a fragment set before then may be dropped by the router's first
  // history update, so tests wait for it.
  const listening = useHydrated();

  const submit = async (value: string) => {
    setBusy(true);
    setError(null);
    try {
      const response = await fetch("/api/auth/login", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ token: value }),
      });
      if (response.ok) window.location.href = "/claims";
      else if (response.status === 401) setError("Unknown token.");
      else {
        // The server's own reason (Redis unreachable, rate limited …), not only its status.
        const body = (await response.json().catch(() => null)) as { error?: { message?: string } } | null;
        const why = body?.error?.message;
        setError(`Login failed (${response.status})${why ? `: ${why}` : ""}.`);
      }
    } catch {
      setError("Login failed: the dashboard server did not answer.");
    } finally {
      setBusy(false);
    }
  };

  // The login link printed by `npm start` carries the token in the fragment (never sent to a server
  // log). Pasting the link into a tab already on /login changes only the fragment: no new page
  // load, so `hashchange` is what tells us.
  useEffect(() => {
    const fromFragment = () => {
      const fromLink = new URLSearchParams(window.location.hash.slice(1)).get("token");
      if (!fromLink) return;
      history.replaceState(null, "", window.location.pathname);
      void submit(fromLink);
    };
    const timer = setTimeout(fromFragment, 0);
    window.addEventListener("hashchange", fromFragment);
    return () => {
      clearTimeout(timer);
      window.removeEventListener("hashchange", fromFragment);
    };
  }, []);

  return (
    <form
      className="mt-4 space-y-3"
      data-listening={listening ? "true" : undefined}
      onSubmit={(event) => {
        event.preventDefault();
        void submit(token.trim());
      }}
    >
      <label className="block text-sm font-medium" htmlFor="token">
        Token
      </label>
      <input
        id="token"
        type="password"
        autoComplete="current-password"
        className="w-full rounded border border-slate-300 px-2 py-1.5 font-mono"
        value={token}
        onChange={(event) => setToken(event.target.value)}
      />
      {error ? (
        <p role="alert" className="text-sm text-red-700">
          {error}
        </p>
      ) : null}
      <button
        type="submit"
        disabled={busy || !token.trim()}
        className="rounded bg-slate-900 px-3 py-1.5 text-sm text-white"
      >
        Log in
      </button>
    </form>
  );
}
