package dev.elfen.policy;

/** What the batch thread does after a check. */
public enum Decision {
    /** Keep executing batch code. */
    RUN,
    /** Step aside: nap until the request lane's signals change. */
    NAP
}
