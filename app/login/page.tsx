import { LoginForm } from "@/components/login-form";

export const metadata = { title: "Log in · claimwatch" };
export const dynamic = "force-dynamic";

export default function LoginPage() {
  return (
    <main className="mx-auto mt-24 max-w-sm rounded border border-slate-200 bg-white p-6 shadow-sm">
      <h1 className="text-lg font-semibold">Log in to claimwatch</h1>
      <p className="mt-1 text-sm text-slate-600">
        Paste an operator or viewer token (see the README; the first <code>npm start</code> prints a login link).
      </p>
      <LoginForm />
    </main>
  );
}
