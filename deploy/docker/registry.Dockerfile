# syntax=docker/dockerfile:1
# The cronmesh registry image. Build from the repository root (the build needs
# the root module, gen/ and go.work):
#
#   docker build -f deploy/docker/registry.Dockerfile -t cronmesh/registry:0.1.0 .
#
# Stage 1 compiles a static binary; stage 2 is scratch with only that binary
# and the CA roots (TLS to PostgreSQL, RabbitMQ and webhook targets), run as
# an unprivileged numeric user so Kubernetes can verify runAsNonRoot. Time
# zones are embedded in the binary (time/tzdata).

# Keep in step with the go directive of go.mod (make test checks it).
ARG GO_VERSION=1.26.0

FROM golang:${GO_VERSION} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOOS=linux GOFLAGS=-trimpath
# Dependencies first, so a source change does not download them again.
COPY go.mod go.sum go.work go.work.sum ./
COPY gen/go.mod gen/go.sum ./gen/
RUN go mod download
COPY gen/ ./gen/
COPY libs/ ./libs/
COPY services/ ./services/
RUN go build -ldflags="-s -w" -o /out/registry ./services/registry/cmd/registry

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/registry /registry
USER 65532:65532
ENTRYPOINT ["/registry"]
CMD ["serve"]
