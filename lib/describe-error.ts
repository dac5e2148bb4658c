/** One line for a log or a health report from any thrown value (the first line of its message). */
export function describeError(error: unknown): string {
  if (error instanceof Error) return error.message.split("\n")[0] ?? error.name;
  return String(error);
}
