# svc-sidecar container image.
#
#   docker build -t svc-sidecar:0.1.0 .
#   docker run --rm -p 8080:8080 -p 9090:9090 \
#     -e SVC_MASTER_KEY -e SVC_API_KEY \
#     -v "$PWD/prod.yaml:/app/config/svc.yaml:ro" -v svc-data:/app/data svc-sidecar:0.1.0
#
# Node 24 runs the TypeScript sources directly (type stripping): there is no build stage,
# only a stage that installs the production dependencies. Mount your own configuration
# over /app/config/svc.yaml: the bundled one is the development file (it listens on
# 127.0.0.1 and seeds a public fallback API key). docs/operations.md has the details.
#
# The base is pinned by tag. For reproducible builds, pin the digest as well:
#   FROM node:24-bookworm-slim@sha256:<digest>

# ---------------------------------------------------------------------------------------
# Production dependencies only. The `node` devDependency (which pins Node 24 for npm
# scripts on developer machines) is not installed: the image already is Node 24.
FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: no runtime dependency needs an install script (no native addons, by
# design), so none gets to run at build time.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund \
 && npm cache clean --force

# ---------------------------------------------------------------------------------------
FROM node:24-bookworm-slim AS runtime

# A dedicated user with a fixed numeric id: Kubernetes' runAsNonRoot can only verify a
# numeric USER, and the chart's fsGroup/runAsUser use the same id.
RUN groupadd --system --gid 10001 svc \
 && useradd --system --uid 10001 --gid 10001 --home-dir /app --no-create-home --shell /usr/sbin/nologin svc

WORKDIR /app
ENV NODE_ENV=production

# Code and dependencies stay owned by root: the service cannot modify itself.
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY src ./src
COPY config ./config
# Node's compile cache keeps the type-stripped, compiled modules: filled here once, so the
# service starts without re-stripping its TypeScript (which costs tens of MB of memory).
ENV NODE_COMPILE_CACHE=/app/.cache/node
RUN node src/main.ts --help > /dev/null
# One malloc arena rather than glibc's default of eight per core: a long stream otherwise
# spreads freed buffers over many arenas and the resident size grows by tens of MB
# (docs/operations.md, "Memory and throughput settings").
ENV MALLOC_ARENA_MAX=1
# Blocks of 32 KiB and more from their own mappings, returned when freed: the compiler's
# working memory of the first requests otherwise stays resident for life (same section).
ENV MALLOC_MMAP_THRESHOLD_=32768

# The store (SQLite + WAL files) and, without SVC_MASTER_KEY, the generated master key
# file live here: the only directory the service writes to.
RUN mkdir -p /app/data && chown 10001:10001 /app/data && chmod 0700 /app/data
VOLUME ["/app/data"]

USER 10001:10001

# 8080: API, /proxy, /healthz, /readyz. 9090: admin listener (/metrics, /healthz, /readyz)
# when server.admin_listen is set to 0.0.0.0:9090, as the Helm chart does.
EXPOSE 8080 9090

# Slim images have no curl: Node's fetch does the check.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:8080/healthz').then(r=>process.exit(r.ok?0:1)).catch(()=>process.exit(1))"]

# Node is PID 1 here and handles SIGTERM/SIGINT itself (src/main.ts).
STOPSIGNAL SIGTERM
# A small young generation and a bounded old-generation growth keep resident memory low
# under load and while bodies stream (docs/operations.md).
CMD ["node", "--max-semi-space-size=4", "--heap-growing-percent=50", "--no-allocation-site-pretenuring", "src/main.ts", "serve", "--config", "/app/config/svc.yaml"]
