# The operator's image (the default target) and the member agent's (--target agent): static binaries on
# distroless, running as a non-root user. make docker-build and make docker-build-agent build them.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY main.go ./
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
COPY pkg/ pkg/
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /manager . && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /consumergroup-agent ./cmd/consumergroup-agent

FROM gcr.io/distroless/static:nonroot AS agent
COPY --from=build /consumergroup-agent /consumergroup-agent
USER 65532:65532
ENTRYPOINT ["/consumergroup-agent"]

FROM gcr.io/distroless/static:nonroot AS manager
COPY --from=build /manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
