-- Every dispatcher replica follows the cancellations as a feed (to drop a
-- queued first attempt without a look-up, and to abort an attempt it has in
-- flight). recorded_at is the database's clock, not the caller's, so that one
-- clock orders the feed whichever replica recorded the cancellation; a
-- reader re-reads a short overlap to cover transactions that commit out of
-- order.
ALTER TABLE cancellations ADD COLUMN recorded_at timestamptz NOT NULL DEFAULT clock_timestamp();
CREATE INDEX cancellations_recorded_at ON cancellations (recorded_at);
