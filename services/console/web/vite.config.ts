import { fileURLToPath } from "node:url";
import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// The generated TypeScript client, compiled from its sources in gen/ts so
// the console always matches the protos of its own checkout.
const generated = fileURLToPath(new URL("../../../gen/ts/src/cronmesh/", import.meta.url));
const consoleURL = process.env.CRONMESH_CONSOLE_URL ?? "http://127.0.0.1:8080";

export default defineConfig({
  plugins: [react()],
  resolve: {
    alias: [{ find: /^@cronmesh\/client\/(.*)$/, replacement: `${generated}$1.ts` }],
    // gen/ts/src would otherwise resolve @bufbuild/protobuf from
    // gen/ts/node_modules: one copy of the runtime, the console's.
    dedupe: ["@bufbuild/protobuf", "@connectrpc/connect"],
  },
  build: {
    // Embedded by services/console/internal/assets (go:embed all:dist).
    outDir: "../internal/assets/dist",
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 1500,
  },
  server: {
    // `npm run dev` against a running console (make dev): the API paths go
    // to it, everything else is served by vite with hot reload.
    proxy: { "^/cronmesh\\.": consoleURL, "/api/": consoleURL },
  },
});
