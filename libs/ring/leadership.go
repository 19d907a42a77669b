package ring

import "context"

// LeaseValid reports whether this node's session lease is certainly alive
// right now: a session exists and the clock has not reached its local
// deadline (which lies before the server's expiry). Work that must stop the
// moment another node could take over (publishing as the elected relay)
// checks it immediately before acting.
func (r *Ring) LeaseValid() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.deadline.IsZero() && r.clock.Now().Before(r.deadline)
}

// Leadership adapts one named election of the ring to what a singleton
// worker needs: Campaign runs fn while elected, Valid checks the lease.
type Leadership struct {
	Ring *Ring
	Name string
}

// Campaign runs fn while this node leads the election; see Ring.Campaign.
func (l Leadership) Campaign(ctx context.Context, fn func(ctx context.Context)) error {
	return l.Ring.Campaign(ctx, l.Name, fn)
}

// Valid reports whether the lease behind the leadership is still certain.
func (l Leadership) Valid() bool { return l.Ring.LeaseValid() }
