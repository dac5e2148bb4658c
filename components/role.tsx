"use client";

import { createContext, useContext, type ReactNode } from "react";
import type { Role } from "@/lib/auth/credentials";

const RoleContext = createContext<Role>("viewer");

export function RoleProvider({ role, children }: { role: Role; children: ReactNode }) {
  return <RoleContext.Provider value={role}>{children}</RoleContext.Provider>;
}

/** Whether the current user may force release and trigger (the server checks again). */
export function useCanOperate(): boolean {
  return useContext(RoleContext) === "operator";
}
