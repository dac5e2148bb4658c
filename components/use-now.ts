"use client";

import { useEffect, useState } from "react";

/** The current time, re-rendered every `everyMs`: for countdowns between polls. */
export function useNow(everyMs = 250): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), everyMs);
    return () => clearInterval(timer);
  }, [everyMs]);
  return now;
}
