-- The backfills running now, one row each, so that the cap on concurrent
-- backfills per namespace holds across every trigger node: a backfill runs
-- inside its RPC on whichever node took the call. The node running it pushes
-- expire_time ahead while it runs and deletes the row when it ends; the row
-- of a node that died expires, and the next backfill of the namespace
-- deletes it.
CREATE TABLE backfills (
    id          uuid        PRIMARY KEY,
    namespace   text        NOT NULL,
    job_id      uuid        NOT NULL,
    node_id     text        NOT NULL,
    start_time  timestamptz NOT NULL,
    expire_time timestamptz NOT NULL
);
CREATE INDEX backfills_namespace ON backfills (namespace);
