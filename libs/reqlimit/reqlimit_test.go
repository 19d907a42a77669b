package reqlimit_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/reqlimit"
	"github.com/cronmesh/cronmesh/libs/rpcerr"
)

func TestChecks(t *testing.T) {
	t.Parallel()
	labels := func(n int) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			m[fmt.Sprintf("k%d", i)] = "v"
		}
		return m
	}
	tests := []struct {
		name   string
		check  func(v *rpcerr.Violations) bool
		fields []string
	}{
		{"id at the cap", func(v *rpcerr.Violations) bool { return reqlimit.ID(v, "id", strings.Repeat("x", reqlimit.MaxIDBytes)) }, nil},
		{"id over", func(v *rpcerr.Violations) bool {
			return reqlimit.ID(v, "id", strings.Repeat("x", reqlimit.MaxIDBytes+1))
		}, []string{"id"}},
		{"page token over", func(v *rpcerr.Violations) bool {
			return reqlimit.PageToken(v, "page_token", strings.Repeat("x", reqlimit.MaxPageTokenBytes+1))
		}, []string{"page_token"}},
		{"count over", func(v *rpcerr.Violations) bool { return reqlimit.Count(v, "xs", 3, 2) }, []string{"xs"}},
		{"ids: too many", func(v *rpcerr.Violations) bool { return reqlimit.IDs(v, "ids", []string{"a", "b"}, 1) }, []string{"ids"}},
		{"ids: one too long", func(v *rpcerr.Violations) bool {
			return reqlimit.IDs(v, "ids", []string{"a", strings.Repeat("x", reqlimit.MaxIDBytes+1)}, 2)
		}, []string{"ids[1]"}},
		{"labels at the cap", func(v *rpcerr.Violations) bool { return reqlimit.Labels(v, "labels", labels(reqlimit.MaxLabels)) }, nil},
		{"labels: too many", func(v *rpcerr.Violations) bool { return reqlimit.Labels(v, "labels", labels(reqlimit.MaxLabels+1)) }, []string{"labels"}},
		{"labels: long value, invalid UTF-8", func(v *rpcerr.Violations) bool {
			return reqlimit.Labels(v, "labels", map[string]string{"a": strings.Repeat("v", reqlimit.MaxLabelValueBytes+1), "b": "\xff"})
		}, []string{`labels["a"]`, `labels["b"]`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var v rpcerr.Violations
			ok := tt.check(&v)
			require.Equal(t, tt.fields == nil, ok)
			var fields []string
			for _, fv := range v.List() {
				fields = append(fields, fv.Field)
			}
			require.Equal(t, tt.fields, fields)
		})
	}
}
