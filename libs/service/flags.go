package service

import (
	"flag"

	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/keyring"
	"github.com/cronmesh/cronmesh/libs/server"
)

// RegisterFlags adds to fs the flags of a service that authenticates with
// managed keys and takes small requests only (trigger, dispatcher, history,
// alerting): config.Common's, with listen as the default of --listen and
// server.SmallAPIMaxRequestBytes as that of --max-request-bytes, then
// --api-keys into apiKeys and the keyring's flags into keys.
func RegisterFlags(fs *flag.FlagSet, common *config.Common, listen string, apiKeys *config.StringList, keys *keyring.Config) {
	common.Limits.MaxRequestBytes = server.SmallAPIMaxRequestBytes
	common.Register(fs, listen)
	keyring.RegisterAPIKeys(fs, apiKeys)
	keys.Register(fs)
}
