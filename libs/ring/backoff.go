package ring

import (
	"math/rand/v2"
	"time"
)

// backoff is capped exponential backoff with "equal jitter": each delay is
// drawn from [d/2, d], so nodes that failed together do not retry together.
// Not safe for concurrent use; each loop owns one.
type backoff struct {
	base, max time.Duration
	cur       time.Duration
}

// next returns the delay before the next attempt and doubles the next one.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.base
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	half := b.cur / 2
	return half + rand.N(half+1)
}

// reset starts over from base after a success.
func (b *backoff) reset() { b.cur = 0 }
