import type { NextConfig } from "next";

const nextConfig: NextConfig = {
  // BullMQ and ioredis load Lua files and native bits at run time: keep them out of the bundle.
  serverExternalPackages: ["bullmq", "ioredis"],
  poweredByHeader: false,
  // proxy.ts redirects "/x/" to "/x" itself, after refusing an overlong URL: Next's own redirect
  // echoed the whole URL into two headers (Location and Refresh), past what HTTP clients accept.
  skipTrailingSlashRedirect: true,
  reactStrictMode: true,
  typescript: { ignoreBuildErrors: false },
};

export default nextConfig;
