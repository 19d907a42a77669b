import { Alert, Button, Center, Paper, PasswordInput, Stack, Text, Title } from "@mantine/core";
import { useState, type FormEvent } from "react";
import { errorText } from "../api";
import { useSessionState } from "../session";

export function SignIn() {
  const { signIn } = useSessionState();
  const [key, setKey] = useState("");
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      await signIn(key.trim());
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <main>
      <Center mih="100vh">
        <Paper withBorder p="xl" w={420} component="form" onSubmit={submit}>
          <Stack>
            <Title order={1} size="h2">
              cronmesh console
            </Title>
            <Text size="sm">
              Sign in with an API key. It is kept in this browser tab only (session storage) and sent to the cronmesh services with each call.
            </Text>
            <PasswordInput label="API key" value={key} onChange={(e) => setKey(e.currentTarget.value)} required autoComplete="off" />
            {error && (
              <Alert color="red" role="alert" title="Sign-in failed">
                {error}
              </Alert>
            )}
            <Button type="submit" loading={busy}>
              Sign in
            </Button>
          </Stack>
        </Paper>
      </Center>
    </main>
  );
}
