package broker

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// CloseTimeout bounds how long closing a subscriber or a publisher waits
// for the broker. Closing an AMQP connection is a round trip (close,
// close-ok); with the broker unreachable that wait ends only when missed
// heartbeats reveal the dead connection, and a service's shutdown must not
// wait for that. What is left unsettled is requeued by the broker when the
// connection dies.
const CloseTimeout = time.Second

// CloseSubscriber closes sub, waiting at most CloseTimeout; after that it
// returns an error and the close goes on in the background (the process
// exit ends it). Call it once the handlers have settled their messages.
func CloseSubscriber(sub message.Subscriber) error {
	done := make(chan error, 1)
	go func() { done <- sub.Close() }()
	timer := time.NewTimer(CloseTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("broker: subscriber still closing after %s; left to the process exit", CloseTimeout)
	}
}
