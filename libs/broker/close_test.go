package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

// stuckSubscriber's Close waits for release, as watermill-amqp's does for
// an unreachable broker's close-ok.
type stuckSubscriber struct {
	release chan struct{}
	err     error
}

func (s *stuckSubscriber) Subscribe(context.Context, string) (<-chan *message.Message, error) {
	return nil, errors.New("not used")
}

func (s *stuckSubscriber) Close() error {
	<-s.release
	return s.err
}

func TestCloseSubscriber(t *testing.T) {
	t.Parallel()
	stuck := &stuckSubscriber{release: make(chan struct{})}
	t.Cleanup(func() { close(stuck.release) })
	done := make(chan error, 1)
	go func() { done <- CloseSubscriber(stuck) }()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "still closing")
	case <-time.After(CloseTimeout + 10*time.Second):
		t.Fatal("CloseSubscriber waited for a Close that does not return")
	}

	boom := errors.New("boom")
	prompt := &stuckSubscriber{release: make(chan struct{}), err: boom}
	close(prompt.release)
	require.ErrorIs(t, CloseSubscriber(prompt), boom, "a Close that returns in time reports its own result")
}
