package keyring

import (
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/apikey"
)

// RoleFromProto returns the role of r, and false for KEY_ROLE_UNSPECIFIED
// and values this build does not know (a newer registry's role is refused
// rather than guessed).
func RoleFromProto(r registryv1.KeyRole) (apikey.Role, bool) {
	switch r {
	case registryv1.KeyRole_KEY_ROLE_ADMIN:
		return apikey.RoleAdmin, true
	case registryv1.KeyRole_KEY_ROLE_EDITOR:
		return apikey.RoleEditor, true
	case registryv1.KeyRole_KEY_ROLE_VIEWER:
		return apikey.RoleViewer, true
	default:
		return "", false
	}
}

// RoleToProto returns the API value of r; KEY_ROLE_UNSPECIFIED for an
// unknown role.
func RoleToProto(r apikey.Role) registryv1.KeyRole {
	switch r {
	case apikey.RoleAdmin:
		return registryv1.KeyRole_KEY_ROLE_ADMIN
	case apikey.RoleEditor:
		return registryv1.KeyRole_KEY_ROLE_EDITOR
	case apikey.RoleViewer:
		return registryv1.KeyRole_KEY_ROLE_VIEWER
	default:
		return registryv1.KeyRole_KEY_ROLE_UNSPECIFIED
	}
}
