package cli

import (
	"context"
	"flag"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

func keysCommand() *command {
	return &command{name: "keys", summary: "manage the namespace's API keys (registry KeyService; needs an admin key, but for whoami)", subs: []*command{
		{name: "create", args: "NAME --role admin|editor|viewer", summary: "create a key; its secret is shown once", setup: keysCreateSetup},
		{name: "list", summary: "list the namespace's keys (never their secrets)", setup: keysListSetup},
		{name: "rotate", args: "ID [--grace D]", summary: "give a key a new secret; the previous one stays valid for the grace period", setup: keysRotateSetup},
		{name: "revoke", args: "ID", summary: "revoke a key: every service refuses it within seconds", setup: keysRevokeSetup},
		{name: "whoami", summary: "the calling key's namespace, id and role (any key)", setup: keysWhoamiSetup},
	}}
}

// roles are the values of --role, in API order.
var roles = map[string]registryv1.KeyRole{
	"admin":  registryv1.KeyRole_KEY_ROLE_ADMIN,
	"editor": registryv1.KeyRole_KEY_ROLE_EDITOR,
	"viewer": registryv1.KeyRole_KEY_ROLE_VIEWER,
}

func keysCreateSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	role := fs.String("role", "", "admin, editor or viewer (required)")
	requestID := fs.String("request-id", "", "idempotency key: repeating the call returns the key the first one created, without its secret")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "NAME"); err != nil {
			return err
		}
		r, ok := roles[*role]
		if !ok {
			return usagef("--role: want admin, editor or viewer")
		}
		resp, err := s.keys.CreateKey(ctx, connect.NewRequest(&registryv1.CreateKeyRequest{Name: args[0], Role: r, RequestId: *requestID}))
		if err != nil {
			return err
		}
		return printKey(s, resp.Msg, resp.Msg.GetKey(), resp.Msg.GetSecret())
	}
}

func keysListSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	revoked := fs.Bool("revoked", false, "include revoked keys")
	pageSize := fs.Int("page-size", 0, "keys per page (default 50, at most 1000)")
	pageToken := fs.String("page-token", "", "the next page, from a previous list")
	all := fs.Bool("all", false, "follow every page")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		req := &registryv1.ListKeysRequest{PageSize: int32(*pageSize), PageToken: *pageToken, ShowRevoked: *revoked}
		items, next, err := collectPages(*all, req.PageToken, func(token string) ([]proto.Message, string, error) {
			req.PageToken = token
			resp, err := s.keys.ListKeys(ctx, connect.NewRequest(req))
			if err != nil {
				return nil, "", err
			}
			return messages(resp.Msg.GetKeys()), resp.Msg.GetNextPageToken(), nil
		})
		if err != nil {
			return err
		}
		return s.out.List(items, next, []string{"ID", "NAME", "ROLE", "CREATED", "ROTATED", "PREVIOUS SECRET UNTIL", "REVOKED"}, func(m proto.Message) []string {
			k := m.(*registryv1.Key)
			return []string{k.GetId(), k.GetName(), roleText(k.GetRole()), timeText(k.GetCreateTime()), timeText(k.GetRotateTime()),
				timeText(k.GetPreviousSecretExpireTime()), timeText(k.GetRevokeTime())}
		})
	}
}

func keysRotateSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	grace := fs.String("grace", "", "how long the previous secret stays valid (default 24h, at most 168h; 0 ends it at once)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		req := &registryv1.RotateKeyRequest{Id: args[0]}
		if *grace != "" {
			d, err := time.ParseDuration(*grace)
			if err != nil {
				return usagef("--grace: want a duration such as 1h")
			}
			req.GracePeriod = durationpb.New(d)
		}
		resp, err := s.keys.RotateKey(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		return printKey(s, resp.Msg, resp.Msg.GetKey(), resp.Msg.GetSecret())
	}
}

func keysRevokeSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.keys.RevokeKey(ctx, connect.NewRequest(&registryv1.RevokeKeyRequest{Id: args[0]}))
		if err != nil {
			return err
		}
		return printKey(s, resp.Msg, resp.Msg.GetKey(), "")
	}
}

func keysWhoamiSetup(*flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		resp, err := s.keys.GetCallerIdentity(ctx, connect.NewRequest(&registryv1.GetCallerIdentityRequest{}))
		if err != nil {
			return err
		}
		id := resp.Msg
		return s.out.Object(id, func() [][2]string {
			kind := "managed"
			if id.GetConfigured() {
				kind = "configured (--api-keys)"
			}
			return [][2]string{
				{"namespace", id.GetNamespace()},
				{"key id", id.GetKeyId()},
				{"role", roleText(id.GetRole())},
				{"key", kind},
			}
		})
	}
}

// printKey prints a key and, after a creation or a rotation, its secret:
// the whole response m for -o json/yaml, so scripts can read the secret.
func printKey(s *session, m proto.Message, k *registryv1.Key, secret string) error {
	return s.out.Object(m, func() [][2]string {
		rows := [][2]string{
			{"id", k.GetId()},
			{"name", k.GetName()},
			{"namespace", k.GetNamespace()},
			{"role", roleText(k.GetRole())},
			{"created", timeText(k.GetCreateTime())},
			{"created by", k.GetCreatedBy()},
			{"rotated", timeText(k.GetRotateTime())},
		}
		if t := k.GetPreviousSecretExpireTime(); t != nil {
			rows = append(rows, [2]string{"previous secret until", timeText(t)})
		}
		if t := k.GetRevokeTime(); t != nil {
			rows = append(rows, [2]string{"revoked", timeText(t)})
		}
		if secret != "" {
			rows = append(rows, [2]string{"secret", secret + "  (shown once: store it now)"})
		}
		return rows
	})
}

func roleText(r registryv1.KeyRole) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "KEY_ROLE_"))
}
