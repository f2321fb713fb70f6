package io.httpdns.android

import java.net.DatagramSocket
import java.net.Inet6Address
import java.net.InetAddress
import java.net.InetSocketAddress

/** Monotonic milliseconds; tests drive a fake one. */
interface Clock {
    fun millis(): Long

    companion object {
        @JvmField
        val SYSTEM: Clock = object : Clock {
            override fun millis(): Long = System.nanoTime() / 1_000_000
        }
    }
}

/**
 * Which network the device is on, and when that changes. On Android the adapter registers a
 * `ConnectivityManager.NetworkCallback` (see docs/android.md); on the JVM [Fixed] is used.
 */
interface NetworkMonitor {
    /** A key per network (`"wifi:<ssid>"`, `"cellular:46001"`): answers are cached per key. */
    fun networkKey(): String

    /** Calls `listener` on every change of network; the SDK registers once at build time. */
    fun register(listener: Listener)

    fun unregister(listener: Listener) {}

    fun interface Listener {
        fun onNetworkChanged(newKey: String)
    }

    /** A network that never changes unless [change] is called (tests, the JVM). */
    class Fixed(initial: String) : NetworkMonitor {
        @Volatile
        private var key = initial
        private val listeners = java.util.concurrent.CopyOnWriteArrayList<Listener>()
        override fun networkKey(): String = key
        override fun register(listener: Listener) { listeners.add(listener) }
        override fun unregister(listener: Listener) { listeners.remove(listener) }

        /** Switches to `newKey` and tells the listeners, as the Android callback does. */
        fun change(newKey: String) {
            key = newKey
            for (l in listeners) l.onNetworkChanged(newKey)
        }
    }
}

/** The SIM's carrier (`telecom`, `unicom`, `mobile`), when the app can tell; null when it cannot. */
fun interface CarrierProvider {
    fun carrier(): String?
}

/**
 * Whether the device can reach IPv6 and IPv4 destinations now: AAAA answers are asked for only
 * with an IPv6 route, and the order follows the stack (IPv6 first on an IPv6-only network).
 */
fun interface IpStackDetector {
    fun stack(): IpStack

    companion object {
        /**
         * The UDP-connect probe (as Android's own resolver does): connecting a datagram socket sends
         * nothing, it only asks the kernel for a route. Works on Android and the JVM.
         */
        @JvmField
        val ROUTES: IpStackDetector = IpStackDetector {
            val v4 = hasRoute(InetAddress.getByAddress(byteArrayOf(8, 8, 8, 8)))
            val v6 = hasRoute(InetAddress.getByAddress(byteArrayOf(0x20, 0x01, 0x48, 0x60.toByte(), 0x48, 0x60.toByte(), 0, 0, 0, 0, 0, 0, 0, 0, 0x88.toByte(), 0x88.toByte())))
            IpStack.of(v4, v6)
        }

        private fun hasRoute(target: InetAddress): Boolean = try {
            DatagramSocket().use { s ->
                s.connect(InetSocketAddress(target, 53))
                val local = s.localAddress
                local != null && !local.isAnyLocalAddress && (target !is Inet6Address || local is Inet6Address)
            }
        } catch (e: Exception) {
            false
        }
    }
}

enum class IpStack(@get:JvmName("v4") val v4: Boolean, @get:JvmName("v6") val v6: Boolean) {
    IPV4(true, false), IPV6(false, true), DUAL(true, true), NONE(false, false);

    companion object {
        @JvmStatic
        fun of(v4: Boolean, v6: Boolean): IpStack = when {
            v4 && v6 -> DUAL
            v6 -> IPV6
            v4 -> IPV4
            else -> NONE
        }
    }
}
