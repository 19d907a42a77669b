// Package app wires the console: configuration, the embedded single-page
// application and the forwarding of the five services' APIs, on one server
// with the health, metrics and TLS of every cronmesh service.
package app
