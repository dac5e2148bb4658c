"use client";
import { useEffect, useRef, type KeyboardEvent, type RefObject } from "react";

const FOCUSABLE =
  'a[href], button:not([disabled]), textarea:not([disabled]), input:not([disabled]), select:not([disabled]), [tabindex]:not([tabindex="-1"])';

/**
 * A modal dialog's keyboard rules: Tab and Shift+Tab stay inside it, and when it closes the focus
 * goes back to what had it when it opened (the button that opened it). Returns the dialog's
 * `onKeyDown` for Tab; the dialog keeps its own Escape.
 */
export function useDialogFocus(dialog: RefObject<HTMLElement | null>): (event: KeyboardEvent) => void {
  // Read while the dialog first renders: by its effects, an autoFocus field has the focus already.
  const opener = useRef<Element | null>(typeof document === "undefined" ? null : document.activeElement);
  useEffect(() => {
    return () => {
      const back = opener.current;
      // After the dialog's own elements are gone: the opener may have been re-rendered meanwhile.
      if (back instanceof HTMLElement && back.isConnected) back.focus();
    };
  }, []);
  return (event) => {
    if (event.key !== "Tab" || !dialog.current) return;
    const focusable = [...dialog.current.querySelectorAll<HTMLElement>(FOCUSABLE)];
    const first = focusable[0];
    const last = focusable.at(-1);
    if (!first || !last) return;
    const active = document.activeElement;
    if (event.shiftKey && (active === first || !dialog.current.contains(active))) {
      event.preventDefault();
      last.focus();
    } else if (!event.shiftKey && (active === last || !dialog.current.contains(active))) {
      event.preventDefault();
      first.focus();
    }
  };
}
