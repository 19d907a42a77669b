# syntax=docker/dockerfile:1
# The cronmesh console image. Build from the repository root (the build needs
# the root module, gen/, go.work and the console's web sources):
#
#   docker build -f deploy/docker/console.Dockerfile -t cronmesh/console:0.1.0 .
#
# Stage 1 builds the single-page application from its lockfile (npm ci,
# then tsc and vite, as `make build` does); stage 2 compiles a static binary
# that embeds it; stage 3 is scratch with only that binary and the CA roots
# (TLS to https:// services), run as an unprivileged numeric user so
# Kubernetes can verify runAsNonRoot.

# Keep in step with the go directive of go.mod (make test checks it).
ARG GO_VERSION=1.26.0
# A Node that vite accepts: services/console/web/package.json's engines
# (make test checks it).
ARG NODE_VERSION=22.12.0

FROM node:${NODE_VERSION}-bookworm-slim AS web
WORKDIR /src
# Dependencies first, so a source change does not install them again.
COPY services/console/web/package.json services/console/web/package-lock.json ./services/console/web/
RUN cd services/console/web && npm ci --no-audit --no-fund --loglevel=error
# The generated TypeScript client is compiled from its sources (vite alias).
COPY gen/ts/src/ ./gen/ts/src/
COPY services/console/web/ ./services/console/web/
RUN cd services/console/web && npm run build

FROM golang:${GO_VERSION} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOOS=linux GOFLAGS=-trimpath
COPY go.mod go.sum go.work go.work.sum ./
COPY gen/go.mod gen/go.sum ./gen/
RUN go mod download
COPY gen/ ./gen/
COPY libs/ ./libs/
COPY services/ ./services/
# The application vite built, where go:embed takes it from.
COPY --from=web /src/services/console/internal/assets/dist/ ./services/console/internal/assets/dist/
RUN go build -ldflags="-s -w" -o /out/console ./services/console/cmd/console

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/console /console
USER 65532:65532
ENTRYPOINT ["/console"]
CMD ["serve"]
