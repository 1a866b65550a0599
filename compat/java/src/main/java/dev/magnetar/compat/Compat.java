package dev.magnetar.compat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * One JVM for the whole compatibility suite: each stdin line is a JSON request naming a scenario and its
 * arguments (the broker's URLs, topic names, ...); each stdout line is that scenario's report, what the
 * official client observed, which the Python tests check. A JVM start and the clients' class loading cost
 * seconds, so the suite pays them once.
 *
 * <p>Report: {"ok": true, "result": {...}} or {"ok": false, "error": "ExceptionClass: message"}.
 */
public final class Compat {
    /** A scenario that outlives this is abandoned and reported as failed, so that pytest is never stuck. */
    private static final long SCENARIO_TIMEOUT_S = 60;

    interface Scenario {
        Map<String, Object> run(Args args) throws Exception;
    }

    private static final Map<String, Scenario> SCENARIOS = new LinkedHashMap<>();

    static {
        Compaction.register(SCENARIOS);
        Listeners.register(SCENARIOS);
        Producing.register(SCENARIOS);
        Subscriptions.register(SCENARIOS);
        Reading.register(SCENARIOS);
        Admin.register(SCENARIOS);
        Schemas.register(SCENARIOS);
        Replication.register(SCENARIOS);
    }

    public static void main(String[] argv) throws Exception {
        ObjectMapper json = new ObjectMapper();
        // Clients may print to stdout; only reports go to the real one.
        PrintStream reports = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true,
                StandardCharsets.UTF_8);
        System.setOut(System.err);
        ExecutorService runner = Executors.newCachedThreadPool(r -> {
            Thread thread = new Thread(r, "scenario");
            thread.setDaemon(true);
            return thread;
        });
        BufferedReader requests = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        reports.println(json.writeValueAsString(Map.of("ok", true, "result", Map.of("scenarios", SCENARIOS.keySet()))));
        String line;
        while ((line = requests.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JsonNode request = json.readTree(line);
            String name = request.path("scenario").asText();
            Map<String, Object> report = new LinkedHashMap<>();
            Scenario scenario = SCENARIOS.get(name);
            if (scenario == null) {
                report.put("ok", false);
                report.put("error", "unknown scenario " + name);
            } else {
                System.err.println("=== scenario " + name + " " + line);
                Future<Map<String, Object>> result = runner.submit(() -> scenario.run(new Args(request)));
                try {
                    report.put("result", result.get(SCENARIO_TIMEOUT_S, TimeUnit.SECONDS));
                    report.put("ok", true);
                } catch (TimeoutException e) {
                    result.cancel(true);
                    report.put("ok", false);
                    report.put("error", "scenario " + name + " took more than " + SCENARIO_TIMEOUT_S + " s");
                } catch (java.util.concurrent.ExecutionException e) {
                    e.getCause().printStackTrace();
                    report.put("ok", false);
                    report.put("error", Util.describe(e.getCause()));
                }
            }
            reports.println(json.writeValueAsString(report));
        }
    }
}
