package io.httpdns.android

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/** The pure parts, with the Rust client's unit-test cases (failover.rs, cache.rs). */
class PureTest {
    private val revive = 600_000L

    private fun pool(p: EjectionPolicy) = HostPool(listOf("a.cdn.com", "b.cdn.com", "c.cdn.com"), p, 0)

    @Test
    fun seedEjectsOnFirstFailureAndRevivesByProbe() {
        val p = pool(EjectionPolicy.SEED)
        assertEquals(HostPool.Effect.EJECTED, p.reportFailure("a.cdn.com", "https://a.cdn.com/x.jpg", 0, revive))
        assertEquals(listOf("b.cdn.com", "c.cdn.com"), p.candidates())
        assertTrue(p.dueProbes(revive - 1).isEmpty())
        assertEquals(listOf("a.cdn.com" to "https://a.cdn.com/x.jpg"), p.dueProbes(revive))
        p.probeResult("a.cdn.com", false, revive, revive)
        assertTrue(p.dueProbes(revive).isEmpty())
        p.probeResult("a.cdn.com", true, 2 * revive, revive)
        assertEquals("a.cdn.com", p.candidates()[0], "traffic moves back to the primary")
    }

    @Test
    fun envoyThresholdsAndGrowingEjection() {
        val p = pool(EjectionPolicy(3, 30_000, 75_000))
        var now = 0L
        fun fail() = p.reportFailure("a.cdn.com", "u", now, 10_000)
        assertEquals(HostPool.Effect.COUNTED, fail())
        p.reportSuccess("a.cdn.com")
        assertEquals(HostPool.Effect.COUNTED, fail())
        assertEquals(HostPool.Effect.COUNTED, fail())
        assertEquals(HostPool.Effect.EJECTED, fail())
        assertEquals(HostPool.Effect.ALREADY_DISABLED, fail())
        assertTrue(p.dueProbes(now + 29_999).isEmpty(), "first ejection: 30 s, not the 10 s interval")
        now += 30_000
        assertEquals(1, p.dueProbes(now).size)
        p.probeResult("a.cdn.com", true, now, 10_000)
        for (expected in listOf(60_000L, 75_000L)) {
            repeat(3) { fail() }
            assertTrue(p.dueProbes(now + expected - 1).isEmpty(), "ejection $expected")
            now += expected
            assertEquals(1, p.dueProbes(now).size)
            p.probeResult("a.cdn.com", true, now, 10_000)
        }
        assertEquals(5, EjectionPolicy.ENVOY.consecutiveFailures)
    }

    @Test
    fun newHostListsKeepKnownState() {
        val p = pool(EjectionPolicy.SEED)
        p.reportFailure("b.cdn.com", "u", 0, revive)
        p.setHosts(listOf("d.cdn.com", "b.cdn.com"), 1)
        assertEquals(listOf("d.cdn.com"), p.candidates())
        assertTrue(p.isDisabled("b.cdn.com"))
        p.setHosts(emptyList(), 2)
        assertTrue(p.candidates().isEmpty())
    }

    @Test
    fun cacheFreshThenRefreshAt75PercentThenExpired() {
        val c = DnsCache()
        c.insert("wifi", "a.example.com", listOf("1.1.1.1"), 100_000, 0)
        var l = c.lookup("wifi", "a.example.com", 0) as DnsCache.Lookup.Fresh
        assertEquals(100_000, l.remainingMs)
        assertFalse(l.refresh)
        assertFalse((c.lookup("wifi", "a.example.com", 74_000) as DnsCache.Lookup.Fresh).refresh)
        assertTrue((c.lookup("wifi", "a.example.com", 75_000) as DnsCache.Lookup.Fresh).refresh, "past 75%: the first user refreshes")
        assertFalse((c.lookup("wifi", "a.example.com", 75_000) as DnsCache.Lookup.Fresh).refresh, "one refresh at a time")
        c.refreshFailed("wifi", "a.example.com", 75_000)
        assertFalse((c.lookup("wifi", "a.example.com", 75_000) as DnsCache.Lookup.Fresh).refresh)
        assertTrue((c.lookup("wifi", "a.example.com", 80_000) as DnsCache.Lookup.Fresh).refresh, "5 s after a failure")
        c.refreshFailed("wifi", "a.example.com", 80_000)
        assertFalse((c.lookup("wifi", "a.example.com", 89_000) as DnsCache.Lookup.Fresh).refresh, "10 s after a second")
        val e = c.lookup("wifi", "a.example.com", 105_000) as DnsCache.Lookup.Expired
        assertEquals(5_000, e.ageMs)
        assertTrue(e.refresh)
        assertEquals(DnsCache.Lookup.Miss, c.lookup("cellular", "a.example.com", 0), "networks do not share answers")
        assertEquals(300_000, DnsCache.backoffMs(20))
    }

    @Test
    fun cacheIsBoundedAndEvictsTheOldest() {
        val c = DnsCache()
        for (i in 0 until DnsCache.MAX_ENTRIES + 5) c.insert("n", "h$i.example.com", listOf("1.1.1.1"), 60_000, i.toLong())
        assertEquals(DnsCache.MAX_ENTRIES, c.size())
        assertEquals(DnsCache.Lookup.Miss, c.lookup("n", "h0.example.com", 0))
        assertTrue(c.lookup("n", "h${DnsCache.MAX_ENTRIES + 4}.example.com", 0) is DnsCache.Lookup.Fresh)
    }

    @Test
    fun jsonRoundTripsAndRefusesGarbage() {
        val text = """{"a":[1,2.5,-3e2,true,false,null,"x\"\\\n\u00e9"],"b":{}}"""
        val v = Json.parseObject(text)
        assertEquals(listOf(1L, 2.5, -300.0, true, false, null, "x\"\\\né"), v["a"])
        assertEquals(Json.write(v), Json.write(Json.parseObject(Json.write(v))), "a written document reads back the same")
        for (bad in listOf("", "{", "[1,]", "{\"a\" 1}", "tru", "\"\\x\"", "1 2", "{\"a\":01x}")) {
            assertTrue(runCatching { Json.parse(bad) }.isFailure, bad)
        }
    }

    @Test
    fun hostsCanonicaliseAsTheConfigCrateDoes() {
        val ok = mapOf(
            "cdn.xxx.com" to "cdn.xxx.com", "CDN.XXX.com" to "cdn.xxx.com", "cdn.xxx.com:8443" to "cdn.xxx.com:8443",
            "127.0.0.1:9000" to "127.0.0.1:9000", "2400:3200:0::1" to "2400:3200::1", "[2400:3200::1]:443" to "[2400:3200::1]:443",
            "[::1]" to "::1", "localhost:8080" to "localhost:8080",
        )
        for ((input, canonical) in ok) assertEquals(canonical, HostNames.canonical(input), input)
        for (bad in listOf("", "cdn", "a..b.com", "cdn.xxx.com:0", "cdn.xxx.com:70000", "cdn.xxx.com:", "cdn.xxx.com:+80",
            "http://cdn.xxx.com", "cdn.xxx.com/path", "[::1", "[::1]x", "[1.2.3.4]:80", "a b.com")) {
            assertEquals(null, HostNames.canonical(bad), bad)
        }
    }
}
