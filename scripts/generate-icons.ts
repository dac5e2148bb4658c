/**
 * Regenerates the app icons in public/ from public/icon.svg (run by hand after editing the SVG):
 * PNGs drawn by Debian's Chromium (no image tool needed) and a favicon.ico that holds PNGs
 * (the ICO container allows PNG entries since Windows Vista; every current browser reads them).
 */
import fs from "node:fs";
import path from "node:path";
import { chromium } from "@playwright/test";

const PUBLIC = path.resolve("public");
const svg = fs.readFileSync(path.join(PUBLIC, "icon.svg"), "utf8");

async function render(size: number): Promise<Buffer> {
  const page = await browser.newPage({ viewport: { width: size, height: size } });
  await page.setContent(
    `<html><body style="margin:0;background:transparent">${svg.replace("<svg ", `<svg width="${size}" height="${size}" `)}</body></html>`,
  );
  const png = await page.screenshot({ omitBackground: true, clip: { x: 0, y: 0, width: size, height: size } });
  await page.close();
  return png;
}

function ico(images: { size: number; png: Buffer }[]): Buffer {
  const header = Buffer.alloc(6 + 16 * images.length);
  header.writeUInt16LE(0, 0);
  header.writeUInt16LE(1, 2); // 1 = icon
  header.writeUInt16LE(images.length, 4);
  let offset = header.length;
  images.forEach(({ size, png }, i) => {
    const entry = 6 + 16 * i;
    header.writeUInt8(size >= 256 ? 0 : size, entry);
    header.writeUInt8(size >= 256 ? 0 : size, entry + 1);
    header.writeUInt16LE(1, entry + 4); // colour planes
    header.writeUInt16LE(32, entry + 6); // bits per pixel
    header.writeUInt32LE(png.length, entry + 8);
    header.writeUInt32LE(offset, entry + 12);
    offset += png.length;
  });
  return Buffer.concat([header, ...images.map((i) => i.png)]);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu"],
});
try {
  for (const [file, size] of [
    ["icon-192.png", 192],
    ["icon-512.png", 512],
    ["apple-touch-icon.png", 180],
  ] as const) {
    fs.writeFileSync(path.join(PUBLIC, file), await render(size));
  }
  const sizes = [16, 32, 48];
  fs.writeFileSync(
    path.join(PUBLIC, "favicon.ico"),
    ico(await Promise.all(sizes.map(async (size) => ({ size, png: await render(size) })))),
  );
} finally {
  await browser.close();
}
