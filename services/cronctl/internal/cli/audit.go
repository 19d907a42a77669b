package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	auditv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1/auditv1connect"
)

// auditServices are the services that keep an audit log, in the order
// their logs are read.
var auditServices = []string{"registry", "trigger", "dispatcher", "history", "alerting"}

func auditCommand() *command {
	return &command{name: "audit", summary: "who changed what: the services' audit logs of the namespace (AuditService; admin keys)", subs: []*command{
		{name: "list", summary: "the newest audit records of every service (or of --service), merged newest first", setup: auditListSetup},
	}}
}

func auditListSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	service := fs.String("service", "", "only this service's log: "+strings.Join(auditServices, ", ")+" (default: all five)")
	key := fs.String("key", "", "only the calls of this key id")
	limit := fs.Int("limit", 100, "records shown, 1 to 1000: the newest of all the logs read")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		if *limit < 1 || *limit > 1000 {
			return usagef("--limit must be 1 to 1000")
		}
		urls := map[string]string{
			"registry": s.cfg.RegistryURL, "trigger": s.cfg.TriggerURL, "dispatcher": s.cfg.DispatcherURL,
			"history": s.cfg.HistoryURL, "alerting": s.cfg.AlertingURL,
		}
		names := auditServices
		if *service != "" {
			if _, ok := urls[*service]; !ok {
				return usagef("--service must be one of %s", strings.Join(auditServices, ", "))
			}
			names = []string{*service}
		}
		httpClient := cmp.Or(s.env.HTTPClient, &http.Client{})
		var events []*auditv1.AuditEvent
		for _, name := range names {
			client := auditv1connect.NewAuditServiceClient(httpClient, urls[name], connect.WithInterceptors(bearer(s.cfg.APIKey)))
			resp, err := client.ListAuditEvents(ctx, connect.NewRequest(&auditv1.ListAuditEventsRequest{PageSize: int32(*limit), KeyId: *key}))
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			events = append(events, resp.Msg.GetEvents()...)
		}
		// The procedure names the service, so the merged list needs no
		// column of its own for it.
		slices.SortStableFunc(events, func(a, b *auditv1.AuditEvent) int {
			return cmp.Or(b.GetTime().AsTime().Compare(a.GetTime().AsTime()), strings.Compare(b.GetId(), a.GetId()))
		})
		items := make([]proto.Message, 0, min(len(events), *limit))
		for _, ev := range events[:min(len(events), *limit)] {
			items = append(items, ev)
		}
		return s.out.List(items, "", []string{"TIME", "KEY", "PROCEDURE", "OBJECTS", "CODE"}, func(m proto.Message) []string {
			ev := m.(*auditv1.AuditEvent)
			return []string{timeText(ev.GetTime()), ev.GetKeyId(), ev.GetProcedure(), cmp.Or(strings.Join(ev.GetObjectIds(), ","), "-"), ev.GetCode()}
		})
	}
}
