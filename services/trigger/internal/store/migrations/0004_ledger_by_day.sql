-- The ledger grows by every slot fired (50 million rows a day at the
-- product's scale), so it is partitioned by day of nominal_time and kept
-- for a retention period by dropping whole days (libs/daypart), never by
-- DELETE. The primary key (job_id, nominal_time) contains the partition key,
-- so it stays the unique key of every slot within a day's partition, and the
-- exactly-once defence holds for as long as the day is kept: after that, a
-- slot could be fired again only by an explicit backfill.
--
-- Rows outside every day's partition (older than the oldest day kept, from a
-- backfill or the rows that predate this migration) go to ledger_default,
-- which the maintenance trims by DELETE; it stays small.
ALTER TABLE ledger RENAME TO ledger_unpartitioned;
ALTER INDEX ledger_pkey RENAME TO ledger_unpartitioned_pkey;

CREATE TABLE ledger (
    job_id       uuid        NOT NULL,
    nominal_time timestamptz NOT NULL,
    -- firing.SlotKind: 1 scheduled, 2 manual, 3 backfill, 4 catch-up, 5 missed.
    kind         smallint    NOT NULL,
    execution_id uuid        NOT NULL,
    record_time  timestamptz NOT NULL,
    -- The partition epoch the slot was committed under; 0 for manual and
    -- backfill slots, which are not fenced (the primary key dedups them).
    epoch        bigint      NOT NULL,
    reason       text        NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, nominal_time)
) PARTITION BY RANGE (nominal_time);

CREATE TABLE ledger_default PARTITION OF ledger DEFAULT;

-- Today and the next two days exist before any row moves, so that today's
-- rows land in today's partition rather than in the default one (whose rows
-- in a day's range would forbid creating that day later).
DO $$
DECLARE
    d date;
BEGIN
    FOR d IN SELECT generate_series((now() AT TIME ZONE 'UTC')::date, (now() AT TIME ZONE 'UTC')::date + 2, interval '1 day')::date LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF ledger FOR VALUES FROM (%L) TO (%L)',
            'ledger_p' || to_char(d, 'YYYYMMDD'),
            d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
    END LOOP;
END
$$;

INSERT INTO ledger SELECT * FROM ledger_unpartitioned;
DROP TABLE ledger_unpartitioned;

-- Tombstones of deleted jobs are kept for a while (an event of the job
-- delivered late must not bring it back) and then removed; this index finds
-- the old ones.
CREATE INDEX jobs_tombstones ON jobs (update_time) WHERE deleted;
