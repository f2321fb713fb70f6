package io.httpdns.android

import android.content.BroadcastReceiver
import android.content.Context
import android.content.Intent
import android.content.IntentFilter
import android.net.ConnectivityManager
import android.telephony.TelephonyManager
import java.util.concurrent.CopyOnWriteArrayList

/**
 * The device's network for [HttpDns.Builder.networkMonitor] on Android: the key is `wifi:<extra
 * info>` or `cellular:<SIM operator>` (answers are cached per key), and every connectivity change
 * (the `CONNECTIVITY_ACTION` broadcast, delivered to receivers registered at run time on every
 * Android version) calls the SDK, which evicts pooled connections and re-resolves. Needs
 * `ACCESS_NETWORK_STATE`. docs/android.md has the `NetworkCallback` variant for apps that prefer it.
 */
class AndroidNetworkMonitor(context: Context) : NetworkMonitor {
    private val app: Context = context.applicationContext ?: context
    private val cm = app.getSystemService(Context.CONNECTIVITY_SERVICE) as ConnectivityManager
    private val tm = app.getSystemService(Context.TELEPHONY_SERVICE) as? TelephonyManager
    private val listeners = CopyOnWriteArrayList<NetworkMonitor.Listener>()
    @Volatile private var key: String = compute()
    private var registered = false

    private val receiver = object : BroadcastReceiver() {
        override fun onReceive(c: Context, intent: Intent) {
            val k = compute()
            if (k != key) {
                key = k
                for (l in listeners) l.onNetworkChanged(k)
            }
        }
    }

    override fun networkKey(): String = key

    override fun register(listener: NetworkMonitor.Listener) {
        listeners.add(listener)
        synchronized(this) {
            if (!registered) {
                app.registerReceiver(receiver, IntentFilter(ConnectivityManager.CONNECTIVITY_ACTION))
                registered = true
            }
        }
    }

    override fun unregister(listener: NetworkMonitor.Listener) {
        listeners.remove(listener)
        synchronized(this) {
            if (listeners.isEmpty() && registered) {
                app.unregisterReceiver(receiver)
                registered = false
            }
        }
    }

    private fun compute(): String {
        val info = try { cm.activeNetworkInfo } catch (e: SecurityException) { null } ?: return "none"
        if (!info.isConnected) return "none"
        return when (info.type) {
            ConnectivityManager.TYPE_WIFI -> "wifi:" + (info.extraInfo ?: "")
            ConnectivityManager.TYPE_MOBILE -> "cellular:" + (tm?.simOperator ?: "")
            else -> "net:" + info.typeName
        }
    }
}

/** The SIM's carrier for [HttpDns.Builder.carrierProvider]: `telecom`, `unicom`, `mobile`, or null. */
class AndroidCarrier(context: Context) : CarrierProvider {
    private val tm = (context.applicationContext ?: context).getSystemService(Context.TELEPHONY_SERVICE) as? TelephonyManager

    override fun carrier(): String? = Carriers.of(try { tm?.simOperator } catch (e: SecurityException) { null })
}

/** MCC+MNC of mainland China's carriers to the labels the server uses. */
internal object Carriers {
    fun of(mccMnc: String?): String? = when (mccMnc) {
        "46000", "46002", "46004", "46007", "46008", "46013" -> "mobile"
        "46001", "46006", "46009", "46010" -> "unicom"
        "46003", "46005", "46011", "46012" -> "telecom"
        "46015" -> "broadnet"
        else -> null
    }
}
