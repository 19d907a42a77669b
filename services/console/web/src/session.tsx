// The signed-in key: kept in sessionStorage only, so it ends with the
// browser tab and is never written to disk by the console.
import { createContext, useContext, useEffect, useMemo, useState, type ReactNode } from "react";
import { makeClients, whoAmI, type Clients, type Identity } from "./api";

const storageKey = "cronmesh.apiKey";

interface Session {
  clients: Clients;
  identity: Identity;
  signOut: () => void;
}

interface SessionState {
  session?: Session;
  /** signIn checks the key with the services and keeps it when it works. */
  signIn: (apiKey: string) => Promise<void>;
  restoring: boolean;
}

const Ctx = createContext<SessionState | undefined>(undefined);

export function SessionProvider({ children }: { children: ReactNode }) {
  const [session, setSession] = useState<Session>();
  const [restoring, setRestoring] = useState(() => sessionStorage.getItem(storageKey) !== null);

  const state = useMemo<SessionState>(() => {
    const signOut = () => {
      sessionStorage.removeItem(storageKey);
      setSession(undefined);
    };
    const signIn = async (apiKey: string) => {
      const clients = makeClients(apiKey);
      const identity = await whoAmI(clients);
      sessionStorage.setItem(storageKey, apiKey);
      setSession({ clients, identity, signOut });
    };
    return { session, signIn, restoring };
  }, [session, restoring]);

  useEffect(() => {
    const saved = sessionStorage.getItem(storageKey);
    if (saved === null) return;
    state.signIn(saved).catch(() => sessionStorage.removeItem(storageKey)).finally(() => setRestoring(false));
    // Only once, at load.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, []);

  return <Ctx.Provider value={state}>{children}</Ctx.Provider>;
}

export function useSessionState(): SessionState {
  const s = useContext(Ctx);
  if (!s) throw new Error("useSessionState outside SessionProvider");
  return s;
}

/** useSession is the signed-in session; the pages render only inside it. */
export function useSession(): Session {
  const s = useSessionState().session;
  if (!s) throw new Error("useSession without a session");
  return s;
}
