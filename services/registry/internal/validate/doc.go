// Package validate checks job definitions and fills their defaults.
//
// It is pure domain logic (no database, no transport): given a job as the
// client sent it, it returns every field violation at once, each naming the
// field by its path in the request, so a client can fix all of them in one
// round trip.
package validate
