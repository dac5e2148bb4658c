/** claimwatch's version, as recorded in heartbeats and run records. */
export const APP_VERSION = "0.1.0";
