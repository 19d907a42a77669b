package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Watch keeps a read pending on conn until ctx is done (it then returns
// nil) or the connection fails (its error), handing every notification
// that arrives to notified (nil: they are dropped). Blocking in
// WaitForNotification notices a terminated backend or a reset connection
// at once; a connection silent for check is pinged, which catches a server
// that vanished without a reset.
func Watch(ctx context.Context, conn *pgx.Conn, check time.Duration, notified func(*pgconn.Notification)) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, check)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			if notified != nil {
				notified(n)
			}
			continue
		case conn.IsClosed() || wctx.Err() == nil:
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, check)
		err = conn.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
