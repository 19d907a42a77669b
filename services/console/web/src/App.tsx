import { AppShell, Badge, Button, Group, NavLink, Text, Title } from "@mantine/core";
import { Link, Route, Routes, useLocation } from "react-router";
import { Alerts } from "./pages/Alerts";
import { DeadLetters } from "./pages/DeadLetters";
import { ExecutionDetail } from "./pages/ExecutionDetail";
import { Executions } from "./pages/Executions";
import { JobDetail } from "./pages/JobDetail";
import { Jobs } from "./pages/Jobs";
import { Overview } from "./pages/Overview";
import { Ring } from "./pages/Ring";
import { SignIn } from "./pages/SignIn";
import { useSessionState } from "./session";

const nav = [
  { to: "/", label: "Overview" },
  { to: "/jobs", label: "Jobs" },
  { to: "/executions", label: "Executions" },
  { to: "/dead-letters", label: "Dead letters" },
  { to: "/alerts", label: "Incidents and alerts" },
  { to: "/ring", label: "Ring" },
];

export function App() {
  const { session, restoring } = useSessionState();
  const location = useLocation();
  if (restoring && !session) return null;
  if (!session) return <SignIn />;
  const { identity, signOut } = session;
  const active = (to: string) => (to === "/" ? location.pathname === "/" : location.pathname.startsWith(to));
  return (
    <AppShell header={{ height: 56 }} navbar={{ width: 220, breakpoint: "sm" }} padding="md">
      <AppShell.Header>
        <Group h="100%" px="md" justify="space-between">
          <Title order={1} size="h3">
            cronmesh
          </Title>
          <Group>
            <Text size="sm" data-testid="identity" title={`key ${identity.keyId}`}>
              {`namespace ${identity.namespace} · `}
              <Badge color="dark" variant="outline" aria-label={`role ${identity.role}`}>
                {identity.role}
              </Badge>
            </Text>
            <Button variant="default" size="xs" onClick={signOut}>
              Sign out
            </Button>
          </Group>
        </Group>
      </AppShell.Header>
      <AppShell.Navbar p="xs" component="nav" aria-label="Pages">
        {nav.map((n) => (
          <NavLink key={n.to} component={Link} to={n.to} label={n.label} variant="filled" active={active(n.to)} aria-current={active(n.to) ? "page" : undefined} />
        ))}
      </AppShell.Navbar>
      <AppShell.Main>
        <Routes>
          <Route path="/" element={<Overview />} />
          <Route path="/jobs" element={<Jobs />} />
          <Route path="/jobs/:id" element={<JobDetail />} />
          <Route path="/executions" element={<Executions />} />
          <Route path="/executions/:id" element={<ExecutionDetail />} />
          <Route path="/dead-letters" element={<DeadLetters />} />
          <Route path="/alerts" element={<Alerts />} />
          <Route path="/ring" element={<Ring />} />
          <Route path="*" element={<Text>No such page.</Text>} />
        </Routes>
      </AppShell.Main>
    </AppShell>
  );
}
