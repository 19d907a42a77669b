package broker

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/tlstest"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// tlsFront terminates TLS with files in front of the test broker, as a
// broker with a TLS listener would, and returns its "host:port".
func tlsFront(t *testing.T, files tlsconfig.Server) string {
	t.Helper()
	cfg, err := files.Config()
	require.NoError(t, err)
	broker, err := url.Parse(amqptest.URL())
	require.NoError(t, err)
	return tlstest.Front(t, cfg, broker.Host, nil)
}

// amqpsURL is the test broker's URL over amqps at addr, naming caFile as
// the chart does (amqp091's cacertfile).
func amqpsURL(t *testing.T, addr, caFile string) string {
	t.Helper()
	u, err := url.Parse(amqptest.URL())
	require.NoError(t, err)
	u.Scheme, u.Host, u.RawQuery = "amqps", addr, "cacertfile="+caFile
	return u.String()
}

// TestAMQPSWithCAFileInTheURL: publishing and consuming over amqps with the
// CA named in the URL, the form the Helm chart gives every service.
func TestAMQPSWithCAFileInTheURL(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "broker")
	pair := ca.Server("rabbitmq")
	addr := tlsFront(t, tlsconfig.Server{CertFile: pair.CertFile, KeyFile: pair.KeyFile})
	secure := amqpsURL(t, addr, ca.CertFile)

	exchange := amqptest.UniqueName(t, "broker-tls")
	queue := amqptest.UniqueName(t, "broker-tls-q")
	sub, err := amqp.NewSubscriber(TopicSubscriberConfig(secure, exchange, queue, "job.#", 4), WatermillLogger(nil))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		require.NoError(t, sub.Close())
		ch := amqptest.Channel(t)
		_, _ = ch.QueueDelete(queue, false, false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
	})
	msgs, err := sub.Subscribe(ctx, queue)
	require.NoError(t, err)

	pub := newTestPublisher(t, secure, exchange)
	require.NoError(t, pub.Publish("job.created", message.NewMessage("over-tls", []byte("x"))))
	got := receive(t, msgs)
	require.Equal(t, "over-tls", got.UUID)
	got.Ack()

	// A broker whose certificate another CA signed is refused.
	declareCtx, cancelDeclare := context.WithTimeout(t.Context(), time.Second)
	defer cancelDeclare()
	other := tlstest.NewCA(t, "other")
	err = DeclareQueues(declareCtx, amqpsURL(t, addr, other.CertFile), QueueBinding{Exchange: exchange, Queue: queue, BindingKey: "job.#"})
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "certificate signed by unknown authority"), err.Error())
}
