/**
 * An endpoint of the control plane at `base`, keeping any path prefix the base has
 * (`https://cp.example/svc/` → `https://cp.example/svc/api/v3/...`).
 */
export function controlPlaneUrl(base: string, path: string): string {
  return new URL(path.replace(/^\//, ''), base.endsWith('/') ? base : `${base}/`).href;
}
