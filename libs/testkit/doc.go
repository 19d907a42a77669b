// Package testkit holds nothing itself: its subpackages are the helpers
// tests share, kept apart from the production packages of libs/ (as
// temporal keeps common/testing). Each gives a test real dependencies,
// isolated per test so that tests run in parallel and leave nothing behind:
//
//   - pgtest: a PostgreSQL schema per test, and a proxy that can cut it off;
//   - amqptest: RabbitMQ names per test, queues, consumers, and a proxy;
//   - etcdtest: an embedded etcd (also `make dev`'s, through devetcd);
//   - proxytest: the TCP proxy behind pgtest's and amqptest's;
//   - freeport: a free loopback port for a server started as a process;
//   - meshtest: the whole mesh or any subset as real processes
//     (libs/meshrun), torn down and cleaned up after the test;
//   - ledger: the independent record of every slot of every-second jobs
//     that the end-to-end and fault-injection suites judge the mesh by;
//   - apptest: a service's app run in its own package's tests, stopped at
//     the test's end, and the checks every app shares;
//   - rpctest: an h2c client, the bearer key, both wire protocols and
//     assertions on Connect codes and field violations;
//   - otlptest, smtptest, tlstest: an OTLP collector, an SMTP server, and
//     certificates and a TLS front for a test server.
package testkit
