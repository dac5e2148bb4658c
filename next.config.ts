import type { NextConfig } from "next";

const nextConfig: NextConfig = {
  // BullMQ and ioredis load Lua files and native bits at run time: keep them out of the bundle.
  serverExternalPackages: ["bullmq", "ioredis"],
  poweredByHeader: false,
  reactStrictMode: true,
  typescript: { ignoreBuildErrors: false },
};

export default nextConfig;
