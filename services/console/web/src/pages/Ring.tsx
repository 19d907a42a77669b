import { Card, SimpleGrid, Stack, Table, Text, Title } from "@mantine/core";
import { useQuery } from "@tanstack/react-query";
import { ErrorAlert } from "../components";
import { when } from "../format";
import { useSession } from "../session";

export function Ring() {
  const { clients } = useSession();
  const q = useQuery({ queryKey: ["ring"], queryFn: () => clients.trigger.getRing({}), refetchInterval: 5_000 });
  const ring = q.data;
  return (
    <Stack>
      <Title order={2}>Ring</Title>
      <Text size="sm">The trigger nodes and the partitions of the jobs each one fires (cluster-wide: an admin key's view).</Text>
      <ErrorAlert error={q.error} />
      {ring && (
        <SimpleGrid cols={{ base: 1, md: 2 }}>
          <Card withBorder>
            <Title order={3} size="h4">
              Members ({ring.members.length}), {ring.partitionCount} partitions
            </Title>
            <Table aria-label="Members">
              <Table.Thead>
                <Table.Tr>
                  <Table.Th>Node</Table.Th>
                  <Table.Th>Address</Table.Th>
                  <Table.Th>Joined</Table.Th>
                  <Table.Th>Partitions</Table.Th>
                </Table.Tr>
              </Table.Thead>
              <Table.Tbody>
                {ring.members.map((m) => (
                  <Table.Tr key={m.nodeId}>
                    <Table.Td>{m.nodeId}</Table.Td>
                    <Table.Td>{m.address}</Table.Td>
                    <Table.Td>{when(m.joinTime)}</Table.Td>
                    <Table.Td>{m.ownedPartitions}</Table.Td>
                  </Table.Tr>
                ))}
              </Table.Tbody>
            </Table>
          </Card>
          <Card withBorder>
            <Title order={3} size="h4">
              Partitions
            </Title>
            <Table aria-label="Partitions">
              <Table.Thead>
                <Table.Tr>
                  <Table.Th>Partition</Table.Th>
                  <Table.Th>Owner</Table.Th>
                  <Table.Th>Epoch</Table.Th>
                </Table.Tr>
              </Table.Thead>
              <Table.Tbody>
                {ring.partitions.map((p) => (
                  <Table.Tr key={p.partition}>
                    <Table.Td>{p.partition}</Table.Td>
                    <Table.Td>{p.owner || "unowned"}</Table.Td>
                    <Table.Td>{String(p.epoch)}</Table.Td>
                  </Table.Tr>
                ))}
              </Table.Tbody>
            </Table>
          </Card>
        </SimpleGrid>
      )}
    </Stack>
  );
}
