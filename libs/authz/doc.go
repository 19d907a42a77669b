// Package authz enforces API key roles: every RPC of every cronmesh service
// states the least role it needs in its proto definition (the method option
// cronmesh.auth.v1.required_role), and Interceptor refuses a call whose
// key's role is below it with PermissionDenied.
//
// The role is read from the generated descriptors, not from a table kept by
// hand, so a new RPC cannot be forgotten: an RPC without the option is
// refused to every key (fail closed), and TestEveryRPCStatesItsRole fails on
// it before it ships.
package authz
