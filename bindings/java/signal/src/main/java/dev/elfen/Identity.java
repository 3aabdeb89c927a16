package dev.elfen;

/**
 * A fixed page identity, for reproducible pages (golden vectors). The clock
 * is always {@link Layout.Clock#MONOTONIC_NS} for pages Java creates (see
 * {@link PageClock}).
 *
 * @param instance instance id, repeated in the batch segment
 * @param creatorPid creator pid
 * @param createdUnixS creation time, Unix seconds
 */
public record Identity(long instance, int creatorPid, long createdUnixS) {}
