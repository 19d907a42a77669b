// Package deploy holds no code: its tests check the deployment artifacts
// beside it against the services they deploy. docker_test.go checks every
// Dockerfile under docker/ (multi-stage, static binary, non-root user, the
// Go version of go.mod, the console's application built from its lockfile)
// and .dockerignore; helm_test.go lints and renders the Helm chart under
// helm/cronmesh with bin/helm and checks the manifests (probes, resources,
// security contexts, ports and environment against each service's flags,
// PodDisruptionBudgets, autoscalers, Secrets).
package deploy
