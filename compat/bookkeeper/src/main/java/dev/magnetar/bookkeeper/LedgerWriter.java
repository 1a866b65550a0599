package dev.magnetar.bookkeeper;

import java.nio.charset.StandardCharsets;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

/**
 * Writes one ledger with BookKeeper's Java client, for magnetar's Python client to read: CRC32C digests
 * and the v2 wire protocol, as Pulsar configures them. Entry i holds "java-entry-i". Prints the ledger id.
 *
 * <p>Usage: LedgerWriter metadataServiceUri ensemble writeQuorum ackQuorum entries password close|open. With
 * "open" the program stops as a crashed writer would: the ledger stays open for a reader to recover.
 */
public final class LedgerWriter {
    private LedgerWriter() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 7) {
            System.err.println("usage: LedgerWriter metadataServiceUri ensemble writeQuorum ackQuorum entries"
                    + " password close|open");
            System.exit(2);
        }
        ClientConfiguration conf = new ClientConfiguration()
                .setMetadataServiceUri(args[0])
                .setUseV2WireProtocol(true);
        int entries = Integer.parseInt(args[4]);
        BookKeeper bk = new BookKeeper(conf);
        try {
            LedgerHandle ledger = bk.createLedger(Integer.parseInt(args[1]), Integer.parseInt(args[2]),
                    Integer.parseInt(args[3]), BookKeeper.DigestType.CRC32C, args[5].getBytes(StandardCharsets.UTF_8));
            for (int i = 0; i < entries; i++) {
                ledger.addEntry(("java-entry-" + i).getBytes(StandardCharsets.UTF_8));
            }
            if ("close".equals(args[6])) {
                ledger.close();
            }
            System.out.println(ledger.getId());
            System.out.flush();
            if (!"close".equals(args[6])) {
                Runtime.getRuntime().halt(0);
            }
        } finally {
            bk.close();
        }
    }
}
