"""A deterministic, realistic inventory feed for the demo dealer, tests and benchmarks.

``generate_listings(count, seed)`` yields valid AAP ``InventoryListing`` objects:
cars (new, used, certified), motorcycles including electric ones, trailers, RVs
and side-by-sides, priced in USD or CAD (with km odometers in Canada), with
verified feature evidence, in-transit and pending units, listings that only
know a list price and the three fee shapes (omitted, ``[]``, itemized). The
same ``(count, seed, settings)`` always gives the same feed, and a shorter feed
is a prefix of a longer one, so benchmarks and tests can rely on exact figures.
"""

from __future__ import annotations

import random
from functools import lru_cache
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar
from urllib.parse import urlsplit

from aap.config.model import Settings

# Feed time anchor: listings were updated in the 60 days before it.
ANCHOR = datetime(2026, 5, 1, tzinfo=timezone.utc)
CURRENT_MODEL_YEAR = 2026
CAD_PER_USD = 1.37

# -- catalogue ------------------------------------------------------------------------
# Combustion powertrain: (fuel, engine, displacement_cc, city_mpg, highway_mpg, transmission)
# Electric powertrain:   ("bev", electric_range_mi, battery_kwh, motor_power_hp, charge_port, dc_fast_charge)
# A catalogue row: fields by position, as the comment above each table says.
Entry = tuple[Any, ...]
T = TypeVar("T")


def _ev(range_mi: float, kwh: float, hp: float, port: str, dcfc: bool) -> Entry:
    return ("bev", range_mi, kwh, hp, port, dcfc)


A8, A10, CVT, ECVT = "8-speed automatic", "10-speed automatic", "cvt", "e-cvt"

# (make, model, body, base_msrp, trims, powertrains, drivelines, wmi)
CARS: tuple[Entry, ...] = (
    ("Toyota", "Corolla", "sedan", 22500, ("LE", "SE", "XSE"),
     (("gas", "2.0L I4", 1987, 32, 41, CVT), ("hybrid", "1.8L I4 Hybrid", 1798, 53, 46, ECVT)), ("fwd",), "JTD"),
    ("Toyota", "Camry", "sedan", 28400, ("LE", "SE", "XLE", "XSE"),
     (("hybrid", "2.5L I4 Hybrid", 2487, 51, 49, ECVT),), ("fwd", "awd"), "4T1"),
    ("Toyota", "RAV4", "suv", 29800, ("LE", "XLE", "XLE Premium", "Limited"),
     (("gas", "2.5L I4", 2487, 27, 35, A8), ("hybrid", "2.5L I4 Hybrid", 2487, 41, 38, ECVT)), ("fwd", "awd"), "2T3"),
    ("Toyota", "Tacoma", "truck", 32000, ("SR", "SR5", "TRD Off-Road", "Limited"),
     (("gas", "2.4L Turbo I4", 2393, 20, 24, A8),), ("rwd", "4wd"), "3TM"),
    ("Toyota", "Highlander", "suv", 39500, ("LE", "XLE", "Limited", "Platinum"),
     (("gas", "2.4L Turbo I4", 2393, 22, 29, A8), ("hybrid", "2.5L I4 Hybrid", 2487, 36, 35, ECVT)), ("fwd", "awd"), "5TD"),
    ("Toyota", "Sienna", "minivan", 39000, ("LE", "XLE", "XSE", "Platinum"),
     (("hybrid", "2.5L I4 Hybrid", 2487, 36, 36, ECVT),), ("fwd", "awd"), "5TD"),
    ("Toyota", "bZ4X", "suv", 37000, ("XLE", "Limited"),
     (_ev(252, 71.4, 214, "nacs", True),), ("fwd", "awd"), "JTM"),
    ("Honda", "Civic", "sedan", 24000, ("LX", "Sport", "EX", "Touring"),
     (("gas", "2.0L I4", 1996, 31, 40, CVT), ("gas", "1.5L Turbo I4", 1498, 33, 42, CVT)), ("fwd",), "2HG"),
    ("Honda", "Accord", "sedan", 28900, ("LX", "EX", "Sport Hybrid", "Touring Hybrid"),
     (("gas", "1.5L Turbo I4", 1498, 29, 37, CVT), ("hybrid", "2.0L I4 Hybrid", 1993, 51, 44, ECVT)), ("fwd",), "1HG"),
    ("Honda", "CR-V", "suv", 31000, ("LX", "EX", "EX-L", "Sport Touring Hybrid"),
     (("gas", "1.5L Turbo I4", 1498, 28, 34, CVT), ("hybrid", "2.0L I4 Hybrid", 1993, 40, 34, ECVT)), ("fwd", "awd"), "7FA"),
    ("Honda", "Pilot", "suv", 40000, ("Sport", "EX-L", "TrailSport", "Elite"),
     (("gas", "3.5L V6", 3471, 19, 25, A10),), ("fwd", "awd"), "5FN"),
    ("Honda", "Odyssey", "minivan", 39000, ("EX", "EX-L", "Sport", "Elite"),
     (("gas", "3.5L V6", 3471, 19, 28, A10),), ("fwd",), "5FN"),
    ("Honda", "Prologue", "suv", 47400, ("EX", "Touring", "Elite"),
     (_ev(296, 85, 288, "ccs", True),), ("fwd", "awd"), "3GP"),
    ("Ford", "F-150", "truck", 38000, ("XL", "XLT", "Lariat", "Platinum"),
     (("gas", "2.7L EcoBoost V6", 2694, 20, 26, A10), ("gas", "5.0L V8", 4951, 17, 24, A10),
      ("hybrid", "3.5L PowerBoost V6 Hybrid", 3496, 23, 24, A10)), ("rwd", "4wd"), "1FT"),
    ("Ford", "Escape", "suv", 30000, ("Active", "ST-Line", "Platinum"),
     (("gas", "1.5L EcoBoost I3", 1497, 27, 34, A8), ("phev", "2.5L I4 Plug-in Hybrid", 2488, 40, 40, ECVT)), ("fwd", "awd"), "1FM"),
    ("Ford", "Bronco", "suv", 40000, ("Big Bend", "Outer Banks", "Badlands", "Wildtrak"),
     (("gas", "2.7L EcoBoost V6", 2694, 17, 19, A10),), ("4wd",), "1FM"),
    ("Ford", "Mustang Mach-E", "suv", 40000, ("Select", "Premium", "GT"),
     (_ev(300, 91, 290, "nacs", True),), ("rwd", "awd"), "3FM"),
    ("Ford", "Maverick", "truck", 24000, ("XL", "XLT", "Lariat"),
     (("hybrid", "2.5L I4 Hybrid", 2488, 42, 33, ECVT), ("gas", "2.0L EcoBoost I4", 1999, 23, 30, A8)), ("fwd", "awd"), "3FT"),
    ("Chevrolet", "Silverado 1500", "truck", 38000, ("WT", "LT", "RST", "High Country"),
     (("gas", "5.3L V8", 5328, 16, 21, A10), ("diesel", "3.0L Duramax I6 Turbo Diesel", 2993, 23, 29, A10)), ("rwd", "4wd"), "1GC"),
    ("Chevrolet", "Equinox", "suv", 28000, ("LT", "RS", "ACTIV"),
     (("gas", "1.5L Turbo I4", 1490, 25, 31, A8),), ("fwd", "awd"), "3GN"),
    ("Chevrolet", "Equinox EV", "suv", 34995, ("LT", "RS"),
     (_ev(319, 85, 213, "ccs", True),), ("fwd", "awd"), "3GN"),
    ("Chevrolet", "Tahoe", "suv", 58000, ("LS", "LT", "Z71", "High Country"),
     (("gas", "5.3L V8", 5328, 15, 20, A10),), ("rwd", "4wd"), "1GN"),
    ("Chevrolet", "Corvette", "coupe", 68000, ("1LT", "2LT", "3LT"),
     (("gas", "6.2L V8", 6162, 16, 24, "8-speed dual-clutch"),), ("rwd",), "1G1"),
    ("Tesla", "Model 3", "sedan", 42490, ("Long Range", "Performance"),
     (_ev(363, 82, 394, "nacs", True),), ("rwd", "awd"), "5YJ"),
    ("Tesla", "Model Y", "suv", 44990, ("Long Range", "Performance"),
     (_ev(320, 81, 384, "nacs", True),), ("rwd", "awd"), "7SA"),
    ("BMW", "3 Series", "sedan", 45500, ("330i", "330i xDrive", "M340i"),
     (("gas", "2.0L Turbo I4", 1998, 26, 36, A8),), ("rwd", "awd"), "3MW"),
    ("BMW", "X3", "suv", 49500, ("xDrive30", "M50"),
     (("gas", "2.0L Turbo I4", 1998, 25, 29, A8),), ("awd",), "5UX"),
    ("BMW", "X5", "suv", 67600, ("sDrive40i", "xDrive40i", "xDrive50e"),
     (("gas", "3.0L Turbo I6", 2998, 21, 26, A8), ("phev", "3.0L Turbo I6 Plug-in Hybrid", 2998, 22, 22, A8)), ("awd",), "5UX"),
    ("BMW", "i4", "sedan", 57900, ("eDrive35", "eDrive40", "M50"),
     (_ev(307, 83.9, 335, "ccs", True),), ("rwd", "awd"), "WBY"),
    ("Hyundai", "Elantra", "sedan", 22000, ("SE", "SEL", "Limited", "N Line"),
     (("gas", "2.0L I4", 1999, 32, 41, CVT),), ("fwd",), "KMH"),
    ("Hyundai", "Tucson", "suv", 28500, ("SE", "SEL", "N Line", "Limited"),
     (("gas", "2.5L I4", 2497, 25, 32, A8), ("hybrid", "1.6L Turbo I4 Hybrid", 1598, 38, 38, "6-speed automatic")), ("fwd", "awd"), "5NM"),
    ("Hyundai", "Santa Fe", "suv", 34000, ("SE", "SEL", "XRT", "Calligraphy"),
     (("gas", "2.5L Turbo I4", 2497, 20, 28, A8),), ("fwd", "awd"), "5NM"),
    ("Hyundai", "Ioniq 5", "suv", 42600, ("SE", "SEL", "Limited"),
     (_ev(303, 84, 225, "nacs", True),), ("rwd", "awd"), "KM8"),
    ("Kia", "Telluride", "suv", 36500, ("LX", "S", "EX", "SX", "SX X-Pro"),
     (("gas", "3.8L V6", 3778, 20, 26, A8),), ("fwd", "awd"), "5XY"),
    ("Kia", "Sportage", "suv", 28000, ("LX", "EX", "X-Line", "SX"),
     (("gas", "2.5L I4", 2497, 25, 32, A8), ("hybrid", "1.6L Turbo I4 Hybrid", 1598, 43, 44, "6-speed automatic")), ("fwd", "awd"), "KND"),
    ("Kia", "EV6", "suv", 42900, ("Light", "Wind", "GT-Line", "GT"),
     (_ev(310, 84, 320, "ccs", True),), ("rwd", "awd"), "KND"),
    ("Subaru", "Outback", "wagon", 29000, ("Premium", "Limited", "Onyx Edition XT", "Wilderness"),
     (("gas", "2.5L H4", 2498, 26, 32, CVT), ("gas", "2.4L Turbo H4", 2387, 22, 29, CVT)), ("awd",), "4S4"),
    ("Subaru", "Forester", "suv", 30000, ("Premium", "Sport", "Limited", "Touring"),
     (("gas", "2.5L H4", 2498, 26, 33, CVT),), ("awd",), "JF2"),
    ("Subaru", "Crosstrek", "hatchback", 26000, ("Premium", "Sport", "Limited"),
     (("gas", "2.0L H4", 1995, 27, 34, CVT),), ("awd",), "JF2"),
    ("Mazda", "CX-5", "suv", 29000, ("2.5 S", "2.5 S Select", "2.5 S Preferred", "2.5 Turbo Signature"),
     (("gas", "2.5L I4", 2488, 24, 30, "6-speed automatic"),), ("awd",), "JM3"),
    ("Mazda", "Mazda3", "hatchback", 24000, ("2.5 S", "Select Sport", "Preferred", "Premium Plus"),
     (("gas", "2.5L I4", 2488, 27, 35, "6-speed automatic"), ("gas", "2.5L I4", 2488, 26, 35, "6-speed manual")), ("fwd", "awd"), "3MZ"),
    ("Mazda", "MX-5 Miata", "convertible", 29000, ("Sport", "Club", "Grand Touring"),
     (("gas", "2.0L I4", 1998, 26, 34, "6-speed manual"),), ("rwd",), "JM1"),
    ("Volkswagen", "Jetta", "sedan", 22500, ("S", "Sport", "SE", "SEL"),
     (("gas", "1.5L Turbo I4", 1498, 30, 41, A8),), ("fwd",), "3VW"),
    ("Volkswagen", "Tiguan", "suv", 30000, ("S", "SE", "SEL R-Line"),
     (("gas", "2.0L Turbo I4", 1984, 24, 31, A8),), ("fwd", "awd"), "3VV"),
    ("Volkswagen", "ID.4", "suv", 45000, ("Standard", "Pro", "Pro S"),
     (_ev(291, 82, 282, "ccs", True),), ("rwd", "awd"), "1V2"),
    ("Nissan", "Rogue", "suv", 29500, ("S", "SV", "SL", "Platinum"),
     (("gas", "1.5L Turbo I3", 1477, 30, 37, CVT),), ("fwd", "awd"), "5N1"),
    ("Nissan", "Altima", "sedan", 27000, ("S", "SV", "SR", "SL"),
     (("gas", "2.5L I4", 2488, 27, 39, CVT),), ("fwd", "awd"), "1N4"),
    ("Nissan", "Leaf", "hatchback", 28140, ("S", "SV Plus"),
     (_ev(212, 60, 214, "chademo", True),), ("fwd",), "1N4"),
    ("Jeep", "Wrangler", "suv", 33000, ("Sport", "Willys", "Sahara", "Rubicon"),
     (("gas", "3.6L V6", 3604, 17, 23, A8), ("phev", "2.0L Turbo I4 Plug-in Hybrid", 1995, 20, 20, A8)), ("4wd",), "1C4"),
    ("Jeep", "Grand Cherokee", "suv", 40000, ("Laredo", "Limited", "Overland", "Summit"),
     (("gas", "3.6L V6", 3604, 19, 26, A8),), ("4wd",), "1C4"),
    ("Ram", "1500", "truck", 42000, ("Tradesman", "Big Horn", "Laramie", "Limited"),
     (("gas", "3.0L Turbo I6", 2993, 17, 24, A8), ("gas", "5.7L HEMI V8", 5654, 15, 21, A8)), ("rwd", "4wd"), "1C6"),
    ("Lexus", "RX", "suv", 50000, ("350", "350h", "500h F Sport"),
     (("gas", "2.4L Turbo I4", 2393, 22, 28, A8), ("hybrid", "2.5L I4 Hybrid", 2487, 37, 34, ECVT)), ("fwd", "awd"), "2T2"),
    ("Lexus", "ES", "sedan", 43000, ("250", "350", "300h"),
     (("hybrid", "2.5L I4 Hybrid", 2487, 43, 44, ECVT),), ("fwd",), "58A"),
    ("Porsche", "911", "coupe", 116000, ("Carrera", "Carrera S", "Carrera 4S"),
     (("gas", "3.0L Twin-Turbo H6", 2981, 18, 24, "8-speed PDK"),), ("rwd", "awd"), "WP0"),
)

# (make, model, body, msrp, powertrain, wmi, final_drive, wheel_count)
# Combustion motorcycle powertrain: ("gas", engine, displacement_cc, transmission)
MOTORCYCLES: tuple[Entry, ...] = (
    ("Harley-Davidson", "Street Glide", "touring", 28999, ("gas", "1923cc Milwaukee-Eight 117 V-twin", 1923, "6-speed manual"), "1HD", "belt", 2),
    ("Harley-Davidson", "Sportster S", "cruiser", 16499, ("gas", "1252cc Revolution Max 1250T V-twin", 1252, "6-speed manual"), "1HD", "belt", 2),
    ("Harley-Davidson", "Fat Boy 114", "cruiser", 21999, ("gas", "1868cc Milwaukee-Eight 114 V-twin", 1868, "6-speed manual"), "1HD", "belt", 2),
    ("Honda", "Gold Wing Tour", "touring", 28900, ("gas", "1833cc flat-six", 1833, "dct"), "JH2", "shaft", 2),
    ("Honda", "Rebel 500", "cruiser", 6699, ("gas", "471cc parallel twin", 471, "6-speed manual"), "JH2", "chain", 2),
    ("Honda", "Africa Twin", "adventure", 14699, ("gas", "1084cc parallel twin", 1084, "6-speed manual"), "JH2", "chain", 2),
    ("Honda", "CBR650R", "sport", 9899, ("gas", "649cc inline-four", 649, "6-speed manual"), "JH2", "chain", 2),
    ("Honda", "ADV160", "scooter", 4299, ("gas", "157cc single", 157, "automatic"), "MLH", "belt", 2),
    ("Yamaha", "MT-07", "standard", 8599, ("gas", "689cc CP2 parallel twin", 689, "6-speed manual"), "JYA", "chain", 2),
    ("Yamaha", "YZF-R7", "sport", 9199, ("gas", "689cc CP2 parallel twin", 689, "6-speed manual"), "JYA", "chain", 2),
    ("Yamaha", "Tenere 700", "adventure", 10999, ("gas", "689cc CP2 parallel twin", 689, "6-speed manual"), "JYA", "chain", 2),
    ("Kawasaki", "Ninja 400", "sport", 5299, ("gas", "399cc parallel twin", 399, "6-speed manual"), "JKA", "chain", 2),
    ("Kawasaki", "Z900", "standard", 9599, ("gas", "948cc inline-four", 948, "6-speed manual"), "JKA", "chain", 2),
    ("Kawasaki", "Vulcan S", "cruiser", 7549, ("gas", "649cc parallel twin", 649, "6-speed manual"), "JKA", "chain", 2),
    ("BMW", "R 1300 GS", "adventure", 18995, ("gas", "1300cc boxer twin", 1300, "6-speed manual"), "WB1", "shaft", 2),
    ("BMW", "S 1000 RR", "sport", 18695, ("gas", "999cc inline-four", 999, "6-speed manual"), "WB1", "chain", 2),
    ("Ducati", "Monster", "standard", 12395, ("gas", "937cc Testastretta V-twin", 937, "6-speed manual"), "ZDM", "chain", 2),
    ("Ducati", "Multistrada V4 S", "adventure", 25995, ("gas", "1158cc V4 Granturismo", 1158, "6-speed manual"), "ZDM", "chain", 2),
    ("Triumph", "Bonneville T120", "standard", 12995, ("gas", "1200cc parallel twin", 1200, "6-speed manual"), "SMT", "chain", 2),
    ("Triumph", "Tiger 900 GT", "adventure", 15695, ("gas", "888cc inline-triple", 888, "6-speed manual"), "SMT", "chain", 2),
    ("Can-Am", "Spyder RT", "touring", 26999, ("gas", "1330cc inline-triple", 1330, "6-speed semi-automatic"), "2BX", "belt", 3),
    ("Zero", "SR/F", "standard", 20295, _ev(171, 17.3, 110, "j1772", False), "538", "belt", 2),
    ("Zero", "FXE", "supermoto", 12495, _ev(100, 7.2, 46, "j1772", False), "538", "belt", 2),
    ("Zero", "DSR/X", "adventure", 24495, _ev(180, 17.3, 100, "j1772", False), "538", "belt", 2),
    ("LiveWire", "One", "standard", 22799, _ev(146, 15.4, 100, "ccs", True), "1HD", "belt", 2),
    ("LiveWire", "S2 Del Mar", "standard", 15499, _ev(113, 10.5, 84, "j1772", False), "1HD", "belt", 2),
    ("Energica", "Experia", "touring", 28500, _ev(256, 22.5, 102, "ccs", True), "ZEN", "chain", 2),
    ("BMW", "CE 04", "scooter", 12095, _ev(80, 8.9, 42, "j1772", False), "WB1", "belt", 2),
)

# (make, model, body, msrp, length_ft, dry_weight_lbs, sleeps, axles, hitch, wmi)
TRAILERS: tuple[Entry, ...] = (
    ("Airstream", "Bambi 16RB", "travel_trailer", 67900, 16, 3000, 2, 1, "bumper pull", "1ST"),
    ("Airstream", "Flying Cloud 25FB", "travel_trailer", 112900, 25, 5700, 6, 2, "bumper pull", "1ST"),
    ("Jayco", "Jay Flight 264BH", "travel_trailer", 36900, 30, 5800, 8, 2, "bumper pull", "1UJ"),
    ("Forest River", "Cherokee 294GEBG", "travel_trailer", 41500, 34, 7100, 8, 2, "bumper pull", "4X4"),
    ("Grand Design", "Momentum 395G", "toy_hauler", 119000, 44, 15000, 8, 3, "fifth wheel", "573"),
    ("Big Tex", "35SA Utility", "utility", 3200, 12, 1000, 0, 1, "bumper pull", "16V"),
    ("Sure-Trac", "7x14 Enclosed Cargo", "cargo", 8900, 14, 2200, 0, 2, "bumper pull", "5JW"),
)

# (make, model, body, msrp, engine, displacement_cc, fuel, transmission, length_ft, sleeps, chassis, wmi)
RVS: tuple[Entry, ...] = (
    ("Winnebago", "View 24D", "class_c", 189000, "3.0L V6 Turbo Diesel", 2987, "diesel", "9-speed automatic", 25, 4, "Mercedes-Benz Sprinter", "W1X"),
    ("Thor", "Four Winds 28A", "class_c", 139000, "7.3L V8", 7300, "gas", "10-speed automatic", 30, 8, "Ford E-450", "1FD"),
    ("Tiffin", "Allegro Open Road 34PA", "class_a", 199000, "7.3L V8", 7300, "gas", "6-speed automatic", 35, 6, "Ford F-53", "1F6"),
    ("Airstream", "Interstate 24GT", "class_b", 229000, "3.0L V6 Turbo Diesel", 2987, "diesel", "9-speed automatic", 24, 2, "Mercedes-Benz Sprinter", "W1X"),
    ("Winnebago", "Solis 59P", "class_b", 135000, "3.6L V6", 3604, "gas", "9-speed automatic", 21, 4, "Ram ProMaster", "3C6"),
    ("Coachmen", "Leprechaun 319MB", "class_c", 129000, "7.3L V8", 7300, "gas", "10-speed automatic", 32, 8, "Ford E-450", "1FD"),
)

# (make, model, body, msrp, engine, displacement_cc, wmi)
OTHERS: tuple[Entry, ...] = (
    ("Polaris", "RZR XP 1000", "side_by_side", 22999, "999cc parallel twin", 999, "4XA"),
    ("Can-Am", "Maverick X3", "side_by_side", 27999, "900cc turbo triple", 900, "3JB"),
    ("Polaris", "Sportsman 570", "atv", 8999, "567cc single", 567, "4XA"),
)

CAR_COLORS = (
    "Crystal Black Pearl", "Platinum White Pearl", "Lunar Silver Metallic", "Meteorite Gray Metallic",
    "Radiant Red Metallic", "Still Night Pearl", "Oxford White", "Agate Black", "Carbonized Gray",
    "Alpine White", "Snow White Pearl", "Deep Crystal Blue Mica", "Soul Red Crystal Metallic",
    "Velocity Blue", "Cement", "Magnetic Gray Metallic", "Wind Chill Pearl", "Supersonic Red",
)
INTERIORS = (
    "Black Cloth", "Gray Cloth", "Black Leather", "Ivory Leather", "Black SofTex",
    "Saddle Brown Leather", "Gray Leatherette", "Black/Red Sport Cloth",
)
MOTO_COLORS = (
    "Vivid Black", "Gloss Black", "Matte Black", "Pearl White", "Candy Red", "Racing Blue",
    "Storm Gray", "Lime Green", "Lava Orange", "Matte Graphite",
)
TRAILER_COLORS = ("Silver Aluminum", "White Fiberglass", "Black", "Granite Gray", "Polar White")
EXTRA_FEATURES = (
    "Bluetooth", "Keyless entry", "Push-button start", "LED headlights", "Dual-zone climate control",
    "Wireless phone charger", "Power liftgate", "Rain-sensing wipers", "Premium audio",
)
NOTES = ("Recently arrived", "Service history available", "One owner", "Just reduced",
         "Non-smoker vehicle", "Clean title")

# Which demo feature codes make sense on which vehicle type (other codes apply to all types).
FEATURE_TYPES: dict[str, frozenset[str]] = {
    "adaptive_cruise_control": frozenset({"car", "motorcycle", "rv"}),
    "apple_carplay": frozenset({"car", "motorcycle", "rv"}),
    "android_auto": frozenset({"car", "motorcycle", "rv"}),
    "heated_front_seats": frozenset({"car", "rv"}),
    "blind_spot_monitor": frozenset({"car", "motorcycle", "rv"}),
    "lane_keeping_assist": frozenset({"car", "rv"}),
    "backup_camera": frozenset({"car", "rv"}),
    "sunroof": frozenset({"car"}),
    "leather_seats": frozenset({"car", "rv"}),
    "navigation": frozenset({"car", "motorcycle", "rv"}),
    "third_row_seating": frozenset({"car"}),
    "tow_package": frozenset({"car", "rv"}),
    "heated_grips": frozenset({"motorcycle", "other"}),
    "traction_control": frozenset({"motorcycle", "other"}),
}
BODY_ONLY: dict[str, frozenset[str]] = {
    "third_row_seating": frozenset({"suv", "minivan"}),
    "tow_package": frozenset({"suv", "truck", "class_a", "class_c"}),
}

# -- small, fast helpers (the generator must make 100k listings in seconds) ----------


def pick(rnd: Callable[[], float], seq: Sequence[T]) -> T:
    """One element of ``seq``; much cheaper than ``Random.choice``."""
    return seq[int(rnd() * len(seq))]


def sample(rnd: Callable[[], float], seq: Iterable[T], k: int) -> list[T]:
    """``k`` distinct elements of ``seq`` (partial Fisher-Yates)."""
    pool = list(seq)
    n = len(pool)
    for i in range(k):
        j = i + int(rnd() * (n - i))
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:k]


_ANCHOR_EPOCH = int(ANCHOR.timestamp())
_UPDATE_WINDOW = 60 * 86400  # listings were updated in the last 60 days
_FIRST_DAY = _ANCHOR_EPOCH // 86400 - 200
_DAYS = [(date(1970, 1, 1) + timedelta(days=_FIRST_DAY + i)).isoformat() for i in range(202)]


def rfc3339(epoch: int) -> str:
    """UTC RFC 3339 timestamp of ``epoch`` seconds within the feed window."""
    seconds = epoch % 86400
    return (f"{_DAYS[epoch // 86400 - _FIRST_DAY]}T{seconds // 3600:02d}:"
            f"{seconds // 60 % 60:02d}:{seconds % 60:02d}Z")


# -- VINs ------------------------------------------------------------------------------

VIN_CHARS = "ABCDEFGHJKLMNPRSTUVWXYZ0123456789"  # the 33 characters a VIN may use
_TRANSLIT = {**{str(d): d for d in range(10)},
             **dict(zip("ABCDEFGH", range(1, 9))), **dict(zip("JKLMN", range(1, 6))),
             "P": 7, "R": 9, **dict(zip("STUVWXYZ", range(2, 10)))}
_WEIGHTS = (8, 7, 6, 5, 4, 3, 2, 10, 0, 9, 8, 7, 6, 5, 4, 3, 2)
_YEAR_CODES = "ABCDEFGHJKLMNPRSTVWXY123456789"  # 2010 = A ... cycles every 30 years


def vin_check_digit(vin: str) -> str:
    """The ISO 3779 / North American check digit (position 9) of a 17-character VIN."""
    total = sum(_TRANSLIT[c] * w for c, w in zip(vin, _WEIGHTS))
    remainder = total % 11
    return "X" if remainder == 10 else str(remainder)


def make_vin(wmi: str, vds: str, year: int, index: int, salt: int) -> str:
    """A valid VIN, unique per ``index`` (below 33 million) for a given ``salt``."""
    serial = (index * 7919 + salt) % 1_000_000  # a bijection of 0..999999 (7919 is coprime)
    plant = VIN_CHARS[(index // 1_000_000 + salt) % 33]
    tail = f"{_YEAR_CODES[(year - 2010) % 30]}{plant}{serial:06d}"
    head = wmi + vds
    total = _head_sum(head) + sum(_TRANSLIT[c] * w for c, w in zip(tail, _WEIGHTS[9:]))
    remainder = total % 11
    return f"{head}{'X' if remainder == 10 else remainder}{tail}"


@lru_cache(maxsize=None)
def _head_sum(head: str) -> int:
    return sum(_TRANSLIT[c] * w for c, w in zip(head, _WEIGHTS))


@lru_cache(maxsize=None)
def _vds(model: str) -> str:
    """Five VIN characters derived from the model name (stable, VIN-legal)."""
    h = 0
    for ch in model:
        h = (h * 131 + ord(ch)) & 0xFFFFFFFF
    out = []
    for _ in range(5):
        out.append(VIN_CHARS[h % 33])
        h //= 33
    return "".join(out)


# -- rooftops ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rooftop:
    """What the generator needs to know about one rooftop to stock it plausibly."""

    name: str
    dealer_id: str | None
    prefix: str
    currency: str  # USD or CAD
    km: bool
    mix: tuple[tuple[str, float], ...]  # (vehicle_type, cumulative weight)
    used_only: bool
    fees: tuple[tuple[str, int], ...]
    site: str  # https origin for vdp_url and photos


def _mix(capabilities: set[str]) -> tuple[tuple[str, float], ...]:
    if "powersports" in capabilities:
        weights = [("motorcycle", 0.62), ("trailer", 0.13), ("rv", 0.13), ("other", 0.12)]
    elif capabilities & {"motorcycle_sales", "rv_sales", "trailer_sales"}:
        weights = [("car", 0.78)]
        if "motorcycle_sales" in capabilities:
            weights.append(("motorcycle", 0.14))
        if "rv_sales" in capabilities:
            weights.append(("rv", 0.04))
        if "trailer_sales" in capabilities:
            weights.append(("trailer", 0.04))
    else:
        weights = [("car", 1.0)]
    total = sum(w for _, w in weights)
    cumulative, acc = [], 0.0
    for kind, weight in weights:
        acc += weight / total
        cumulative.append((kind, acc))
    cumulative[-1] = (cumulative[-1][0], 1.0)
    return tuple(cumulative)


def _site(rooftop: dict[str, Any]) -> str:
    website = rooftop.get("website")
    if isinstance(website, str) and website.startswith("https://"):
        parts = urlsplit(website)
        return f"https://{parts.netloc}"
    return "https://inventory.dealer.example"


def rooftops_for(settings: Settings) -> list[Rooftop]:
    """Every rooftop that can hold listings (the sellers' rooftops in aggregate scope)."""
    out: list[Rooftop] = []
    prefixes: set[str] = set()
    for profile in settings.all_profiles():
        for rooftop in profile.rooftops:
            name = rooftop["name"]
            words = [w for w in name.replace("-", " ").split() if w[:1].isalnum()]
            prefix = "".join(w[0] for w in words[1:4] or words[:1]).upper() or "R"
            base, n = prefix, 2
            while prefix in prefixes:
                prefix, n = f"{base}{n}", n + 1
            prefixes.add(prefix)
            country = str((rooftop.get("address") or {}).get("country", "US")).upper()
            canadian = country in ("CA", "CAN", "CANADA")
            currency = rooftop.get("currency") or ("CAD" if canadian else "USD")
            lowered = name.lower()
            out.append(Rooftop(
                name=name,
                dealer_id=profile.dealer_id if settings.scope == "aggregate" else None,
                prefix=prefix,
                currency=currency,
                km=canadian or currency == "CAD",
                mix=_mix(set(rooftop.get("capabilities") or ())),
                used_only="pre-owned" in lowered or "used" in lowered.split(),
                fees=tuple((f["name"], f["amount"]) for f in rooftop.get("fees") or ()),
                site=_site(rooftop),
            ))
    return out


def _default_settings() -> Settings:
    from aap.config.loader import load_settings

    return load_settings(None, environ={})


# -- the generator ------------------------------------------------------------------------


def generate_listings(count: int, seed: int = 0, *, settings: Settings | None = None) -> Iterator[dict[str, Any]]:
    """Yield ``count`` InventoryListing dicts for ``settings`` (default: the demo dealer group)."""
    settings = settings or _default_settings()
    rooftops = rooftops_for(settings)
    if not rooftops:
        return
    vocabulary = [(f.code, f.label) for f in settings.features]
    rnd = random.Random(seed).random
    salt = random.Random(seed ^ 0x5EED).randrange(1_000_000)
    builder = _Builder(rnd, vocabulary, salt)
    n_rooftops = len(rooftops)
    for index in range(count):
        yield builder.listing(index, rooftops[int(rnd() * n_rooftops)])


class _Builder:
    """Holds the random stream and the per-type vocabularies; one ``listing`` per call."""

    def __init__(self, rnd: Callable[[], float], vocabulary: list[tuple[str, str]], salt: int) -> None:
        self.rnd = rnd
        self.salt = salt
        self.vocab_by_type: dict[str, list[tuple[str, str]]] = {
            kind: [(c, l) for c, l in vocabulary if kind in FEATURE_TYPES.get(c, {kind})]
            for kind in ("car", "motorcycle", "trailer", "rv", "other")
        }

    def listing(self, index: int, rooftop: Rooftop) -> dict[str, Any]:
        rnd = self.rnd
        r = rnd()
        kind = next(k for k, edge in rooftop.mix if r < edge)
        if kind == "car":
            item = self._car(rooftop)
        elif kind == "motorcycle":
            item = self._motorcycle(rooftop)
        elif kind == "trailer":
            item = self._trailer()
        elif kind == "rv":
            item = self._rv()
        else:
            item = self._other()
        return self._finish(item, kind, index, rooftop)

    # -- per type -------------------------------------------------------------------
    def _condition_year(self, rooftop: Rooftop, new_share: float) -> tuple[str, int]:
        rnd = self.rnd
        r = rnd()
        if not rooftop.used_only and r < new_share:
            return "new", CURRENT_MODEL_YEAR - (rnd() < 0.35)
        if r < new_share + (1 - new_share) * 0.3:
            return "cpo", CURRENT_MODEL_YEAR - (1 + int(rnd() * 6))
        return "used", CURRENT_MODEL_YEAR - (1 + int(rnd() * 12))

    def _car(self, rooftop: Rooftop) -> dict[str, Any]:
        rnd = self.rnd
        make, model, body, msrp, trims, powertrains, drivelines, wmi = pick(rnd, CARS)
        condition, year = self._condition_year(rooftop, 0.5)
        t = int(rnd() * len(trims))
        pt = pick(rnd, powertrains)
        item: dict[str, Any] = {
            "_wmi": wmi, "_model": model, "_base": round(msrp * (1 + 0.09 * t) / 5) * 5,
            "year": year, "make": make, "model": model, "trim": trims[t], "condition": condition,
            "body": body, "driveline": pick(rnd, drivelines),
            "exterior_color": pick(rnd, CAR_COLORS),
            "interior_color": pick(rnd, INTERIORS),
        }
        if rnd() < 0.7:
            item["vehicle_type"] = "car"
        if pt[0] == "bev":
            _, range_mi, kwh, hp, port, dcfc = pt
            item.update(fuel="bev", transmission="automatic", electric_range_mi=range_mi,
                        battery_kwh=kwh, motor_power_hp=hp, dc_fast_charge=dcfc, charge_port=port)
        else:
            fuel, engine, cc, city, hwy, transmission = pt
            item.update(fuel=fuel, engine=engine, displacement_cc=cc, transmission=transmission)
            if fuel != "phev" or rnd() < 0.5:
                item["city_mpg"], item["highway_mpg"] = city, hwy
            if fuel == "phev":
                item.update(electric_range_mi=pick(rnd, (21, 22, 25, 32, 37, 40)),
                            battery_kwh=pick(rnd, (14.4, 17.3, 25.7)),
                            dc_fast_charge=False, charge_port="j1772")
        item["_miles_per_year"] = 11_500
        return item

    def _motorcycle(self, rooftop: Rooftop) -> dict[str, Any]:
        rnd = self.rnd
        make, model, body, msrp, pt, wmi, drive, wheels = pick(rnd, MOTORCYCLES)
        condition, year = self._condition_year(rooftop, 0.6)
        item: dict[str, Any] = {
            "_wmi": wmi, "_model": model, "_base": msrp, "vehicle_type": "motorcycle",
            "year": year, "make": make, "model": model, "condition": condition, "body": body,
            "exterior_color": pick(rnd, MOTO_COLORS),
            "other_attributes": {"final_drive": drive, "wheel_count": wheels, "abs": True},
        }
        if pt[0] == "bev":
            _, range_mi, kwh, hp, port, dcfc = pt
            item.update(fuel="bev", transmission="automatic", electric_range_mi=range_mi,
                        battery_kwh=kwh, motor_power_hp=hp, dc_fast_charge=dcfc, charge_port=port)
        else:
            _, engine, cc, transmission = pt
            item.update(fuel="gas", engine=engine, displacement_cc=cc, transmission=transmission)
            item["other_attributes"]["engine_stroke"] = 4
        item["_miles_per_year"] = 3_200
        return item

    def _trailer(self) -> dict[str, Any]:
        rnd = self.rnd
        make, model, body, msrp, length, weight, sleeps, axles, hitch, wmi = pick(rnd, TRAILERS)
        condition, year = self._condition_year(_ANY, 0.65)
        attrs: dict[str, Any] = {"length_ft": length, "dry_weight_lbs": weight, "axles": axles,
                                 "hitch": hitch}
        if sleeps:
            attrs["sleeps"] = sleeps
        return {
            "_wmi": wmi, "_model": model, "_base": msrp, "_miles_per_year": 0,
            "vehicle_type": "trailer", "year": year, "make": make, "model": model,
            "condition": "used" if condition == "cpo" else condition, "body": body,
            "exterior_color": pick(rnd, TRAILER_COLORS),
            "other_attributes": attrs,
        }

    def _rv(self) -> dict[str, Any]:
        rnd = self.rnd
        make, model, body, msrp, engine, cc, fuel, transmission, length, sleeps, chassis, wmi = pick(rnd, RVS)
        condition, year = self._condition_year(_ANY, 0.55)
        return {
            "_wmi": wmi, "_model": model, "_base": msrp, "_miles_per_year": 5_000,
            "vehicle_type": "rv", "year": year, "make": make, "model": model,
            "condition": "used" if condition == "cpo" else condition, "body": body,
            "engine": engine, "displacement_cc": cc, "fuel": fuel, "transmission": transmission,
            "exterior_color": pick(rnd, TRAILER_COLORS),
            "other_attributes": {"length_ft": length, "sleeps": sleeps, "chassis": chassis,
                                 "generator": rnd() < 0.8},
        }

    def _other(self) -> dict[str, Any]:
        rnd = self.rnd
        make, model, body, msrp, engine, cc, wmi = pick(rnd, OTHERS)
        condition, year = self._condition_year(_ANY, 0.6)
        return {
            "_wmi": wmi, "_model": model, "_base": msrp, "_miles_per_year": 900,
            "vehicle_type": "other", "year": year, "make": make, "model": model,
            "condition": "used" if condition == "cpo" else condition, "body": body,
            "engine": engine, "displacement_cc": cc, "fuel": "gas", "transmission": "cvt",
            "exterior_color": pick(rnd, MOTO_COLORS),
            "other_attributes": {"seats": 2, "wheel_count": 4},
        }

    # -- shared fields ----------------------------------------------------------------
    def _finish(self, item: dict[str, Any], kind: str, index: int, rooftop: Rooftop) -> dict[str, Any]:
        rnd = self.rnd
        wmi, model, base = item.pop("_wmi"), item.pop("_model"), item.pop("_base")
        per_year = item.pop("_miles_per_year")
        year, condition = item["year"], item["condition"]
        vehicle_id = f"veh_{(index * 0x9E3779B1 + self.salt) & 0xFFFFFFFFFF:010x}"
        stock = f"{rooftop.prefix}{'N' if condition == 'new' else 'U'}{10000 + index}"
        out: dict[str, Any] = {
            "vehicle_id": vehicle_id,
            "vin": make_vin(wmi, _vds(model), year, index, self.salt),
            "stock": stock,
        }
        if rooftop.dealer_id is not None:
            out["dealer_id"] = rooftop.dealer_id
        out.update(item)
        out["rooftop"] = rooftop.name

        # Status: only new units are in transit; any unit may have a deal pending.
        r = rnd()
        if condition == "new" and r < 0.12:
            out["status"] = "intransit"
        elif r > 0.92:
            out["status"] = "pending"
        else:
            out["status"] = "available"

        # Odometer (native unit; km in Canada).
        if per_year:
            age = max(CURRENT_MODEL_YEAR - year, 0)
            miles = (2 + int(rnd() * 39)) if condition == "new" else int(
                per_year * (age + rnd()) * (0.6 + 0.8 * rnd())) + 150
            if condition == "cpo":
                miles = min(miles, 60_000)
            if rooftop.km:
                out["mileage"] = int(miles * 1.609344)
                out["mileage_unit"] = "km"
            else:
                out["mileage"] = miles
                if rnd() < 0.3:
                    out["mileage_unit"] = "mi"

        updated = _ANCHOR_EPOCH - int(rnd() * _UPDATE_WINDOW)
        slug = stock.lower()
        out["vdp_url"] = f"{rooftop.site}/inventory/{slug}"
        photos = int(rnd() * 9)
        if photos:
            out["photos"] = [f"{rooftop.site}/photos/{slug}/{k}.jpg" for k in range(1, photos + 1)]
        self._price(out, base, condition, year, rooftop)
        updated_at = rfc3339(updated)
        self._evidence(out, kind, updated_at)
        out["updated_at"] = updated_at
        out["inventory_date"] = _DAYS[(updated // 86400) - _FIRST_DAY - int(rnd() * 90)]
        trim = f" {out['trim']}" if "trim" in out else ""
        out["description"] = (
            f"{year} {out['make']} {out['model']}{trim} in {out['exterior_color']}"
            + (", certified pre-owned with a multi-point inspection." if condition == "cpo"
               else ", brand new." if condition == "new" else ", pre-owned.")
        )
        if rnd() < 0.25:
            out["notes"] = pick(rnd, NOTES)
        return out

    def _price(self, out: dict[str, Any], base: int, condition: str, year: int, rooftop: Rooftop) -> None:
        rnd = self.rnd
        factor = CAD_PER_USD if rooftop.currency == "CAD" else 1.0
        if rooftop.currency == "CAD" or rnd() < 0.5:
            out["currency"] = rooftop.currency
        if condition == "new":
            msrp = int(round(base * factor / 5) * 5)
            list_price = msrp - pick(rnd, (0, 0, 250, 500, 1000, 1500))
            out["msrp"] = msrp
        else:
            age = max(CURRENT_MODEL_YEAR - year, 0)
            value = base * factor * (0.86 ** age) * (0.9 + 0.15 * rnd())
            list_price = max(int(value / 100) * 100 - 5, 995)
        # Fees: omitted (not disclosed), [] (none) or the rooftop's itemization.
        r = rnd()
        fees: list[dict[str, Any]] | None
        if r < 0.25:
            fees = None
        elif r < 0.45:
            fees = []
        else:
            fees = [{"name": name, "amount": amount} for name, amount in rooftop.fees] or None
        out["list_price"] = list_price
        if rnd() < 0.06:
            # A provider that only knows a list amount publishes list_price and omits price.
            if fees is not None:
                out["fees"] = fees
            return
        out["price"] = list_price + sum(f["amount"] for f in fees or ())
        if fees is not None:
            out["fees"] = fees

    def _evidence(self, out: dict[str, Any], kind: str, observed_at: str) -> None:
        rnd = self.rnd
        body = out.get("body")
        vocab = [(c, l) for c, l in self.vocab_by_type[kind]
                 if c not in BODY_ONLY or body in BODY_ONLY[c]]
        if not vocab:
            return
        chosen = sample(rnd, vocab, int(rnd() * (min(7, len(vocab)) + 1)))
        if not chosen:
            return
        evidence = []
        labels = []
        for code, label in chosen:
            r = rnd()
            entry: dict[str, Any] = {"code": code, "label": label}
            if r < 0.64:
                entry["status"] = "present"
                labels.append(label)
                s = rnd()
                if s < 0.45:
                    entry["source"], entry["text"] = "inventory", f"Equipment sheet for this unit lists: {label}."
                elif s < 0.8:
                    entry["source"], entry["text"] = "manufacturer", f"Manufacturer build data for this VIN includes: {label}."
                else:
                    entry["source"], entry["text"] = "dealer", f"Verified on the unit by our staff: {label}."
                if rnd() < 0.3:
                    entry["url"] = f"{out['vdp_url']}#equipment"
                if rnd() < 0.5:
                    entry["observed_at"] = observed_at
            elif r < 0.86:
                entry["status"] = "absent"
                entry["source"] = "dealer" if rnd() < 0.6 else "inventory"
                entry["text"] = f"Checked on the unit: not fitted ({label})."
            else:
                entry["status"] = "unknown"
            evidence.append(entry)
        out["feature_evidence"] = evidence
        if labels or rnd() < 0.5:
            extras = sample(rnd, EXTRA_FEATURES, int(rnd() * 4)) if kind == "car" else []
            features = labels + extras
            if features:
                out["features"] = features


# Rooftop stand-in for unit types whose new/used share does not depend on the store.
_ANY = Rooftop("", None, "", "USD", False, (("car", 1.0),), False, (), "")
