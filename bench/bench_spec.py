import time, sys
sys.path.insert(0, "tests")
from aap.config.loader import load_settings
from aap.inventory.demo import generate_listings
from aap.spec import validate
from test_spec_validate import SEARCH, LEAD
rows = list(generate_listings(1000, seed=11, settings=load_settings(environ={})))
def per(fn, n):
    fn(); t = time.perf_counter()
    for _ in range(n): fn()
    return (time.perf_counter() - t) / n * 1e6
print(f"validate(search request):      {per(lambda: validate(SEARCH, 'inventory-search-request'), 2000):8.1f} us")
print(f"validate(lead.submit request): {per(lambda: validate(LEAD, 'lead-submit-request'), 2000):8.1f} us")
print(f"validate(listing) per row:     {per(lambda: [validate(r, 'inventory-listing') for r in rows], 3)/len(rows):8.1f} us")
try:
    from aap.inventory.fastvalid import is_valid as fv
    print(f"fastvalid.is_valid per row:    {per(lambda: [fv(r, 'inventory-listing') for r in rows], 3)/len(rows):8.1f} us")
except ImportError:
    from aap.spec import is_valid
    print(f"spec.is_valid per row:         {per(lambda: [is_valid(r, 'inventory-listing') for r in rows], 3)/len(rows):8.1f} us")
