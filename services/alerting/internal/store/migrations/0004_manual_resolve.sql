-- Incidents resolved by hand (AlertService.ResolveIncident): resolved_by is
-- the key that did it, empty when an incident resolved by itself. The
-- latest manual resolution of a (rule, job) is where its rule starts
-- counting again: what happened before it no longer opens an incident
-- (docs/api.md, Resolving an incident by hand). The partial index keeps
-- that look-up cheap: manual resolutions are few.
ALTER TABLE incidents ADD COLUMN resolved_by text NOT NULL DEFAULT '';
CREATE INDEX incidents_manual_resolve ON incidents (rule_id, job_id, resolve_time) WHERE resolved_by <> '';
