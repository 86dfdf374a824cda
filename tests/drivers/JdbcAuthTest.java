// pgjdbc authentication: SCRAM-SHA-256 over TLS with the test CA
// (sslmode=verify-full, sslrootcert), SCRAM over plain TCP, and a wrong password
// refused with SQLSTATE 28P01.
// Usage: SUNDIAL_HOST=.. SUNDIAL_PORT=.. SUNDIAL_PASSWORD=.. SUNDIAL_CA=ca.pem
//        java -cp /usr/share/java/postgresql.jar JdbcAuthTest.java
import java.sql.*;
import java.util.*;

public class JdbcAuthTest {
    static int passed = 0;
    static List<String> failures = new ArrayList<>();

    static void check(String what, boolean ok, String detail) {
        if (ok) { passed++; return; }
        failures.add(what + ": " + detail);
        System.err.println("  CHECK FAILED: " + what + ": " + detail);
    }

    static String login(String url, String password) throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", "sundial");
        p.setProperty("password", password);
        try (Connection c = DriverManager.getConnection(url, p);
             Statement st = c.createStatement();
             ResultSet rs = st.executeQuery("SELECT current_user")) {
            rs.next();
            return rs.getString(1);
        }
    }

    public static void main(String[] args) {
        String host = System.getenv().getOrDefault("SUNDIAL_HOST", "127.0.0.1");
        String port = System.getenv().getOrDefault("SUNDIAL_PORT", "5432");
        String password = System.getenv("SUNDIAL_PASSWORD");
        String ca = System.getenv("SUNDIAL_CA");
        String base = "jdbc:postgresql://" + host + ":" + port + "/sundial?connectTimeout=10";
        String tls = base + "&sslmode=verify-full&sslrootcert=" + ca;
        try {
            check("SCRAM over TLS", "sundial".equals(login(tls, password)), "current_user");
            check("SCRAM without TLS", "sundial".equals(login(base + "&sslmode=disable", password)), "current_user");
        } catch (SQLException e) {
            failures.add("login raised: " + e.getMessage() + " (" + e.getSQLState() + ")");
        }
        try {
            login(tls, "wrong");
            check("wrong password refused", false, "connected");
        } catch (SQLException e) {
            check("wrong password refused with 28P01", "28P01".equals(e.getSQLState()),
                  e.getSQLState() + " " + e.getMessage());
        }
        if (!failures.isEmpty()) {
            System.err.println("FAIL [auth (pgjdbc)] " + failures);
            System.exit(1);
        }
        System.out.println("PASS [auth (pgjdbc)]");
        System.out.println("auth (pgjdbc): " + passed + " passed, 0 failed");
    }
}
